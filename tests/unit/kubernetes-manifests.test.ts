import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { ConcurrencyConfig } from '../../src/shared/config/schema.js';
import { ROLE_QUEUE, Role } from '../../src/shared/queues.js';
import { kedaCrdErrors, schemaErrors, unknownFieldErrors } from '../support/k8s-schemas.js';
import { overlaysUnder, render, type Manifest } from '../support/kustomize.js';
import { scalerQuery } from '../support/promql.js';

// deploy/kubernetes: every overlay is rendered (tests/support/kustomize.ts) and each manifest
// checked offline against the Kubernetes and KEDA schemas (tests/support/k8s-schemas.ts), then
// against what orq needs of it. No cluster runs here: see docs/kubernetes.md, "What is tested".

const projectRoot = fileURLToPath(new URL('../..', import.meta.url));
const deployRoot = join(projectRoot, 'deploy', 'kubernetes');
const OVERLAYS = overlaysUnder(join(deployRoot, 'overlays'));

interface Container {
  name: string;
  image: string;
  args?: string[];
  ports?: { name?: string; containerPort: number }[];
  env?: {
    name: string;
    value?: string;
    valueFrom?: { secretKeyRef?: { name: string; key: string } };
  }[];
  envFrom?: { configMapRef?: { name: string } }[];
  volumeMounts?: { name: string; mountPath: string }[];
  readinessProbe?: { httpGet?: { path: string; port: string | number } };
  livenessProbe?: { httpGet?: { path: string; port: string | number } };
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
}
interface PodTemplate {
  metadata: { labels: Record<string, string> };
  spec: {
    terminationGracePeriodSeconds?: number;
    containers: Container[];
    volumes?: {
      name: string;
      secret?: { secretName: string; items?: { key: string; path: string }[] };
    }[];
  };
}
type Workload = Manifest & {
  spec: { selector: { matchLabels: Record<string, string> }; template: PodTemplate };
};

const of = <T extends Manifest>(manifests: Manifest[], kind: string) =>
  manifests.filter((m) => m.kind === kind) as T[];
const named = <T extends Manifest>(manifests: Manifest[], kind: string, name: string) => {
  const found = of<T>(manifests, kind).find((m) => m.metadata.name === name);
  if (!found) throw new Error(`no ${kind}/${name}`);
  return found;
};
const selects = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);
const flag = (args: readonly string[], name: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};

it('finds the overlays', () => {
  expect(OVERLAYS).toEqual(['production', 'production-hpa', 'try']);
});

describe.each(OVERLAYS)('overlays/%s', (overlay) => {
  const manifests = render(join(deployRoot, 'overlays', overlay));

  it('validates against the Kubernetes and KEDA schemas, with no unknown field', () => {
    expect(schemaErrors(manifests)).toEqual([]);
    expect(unknownFieldErrors(manifests, projectRoot)).toEqual([]);
    expect(kedaCrdErrors(manifests)).toEqual([]);
  });

  it('runs each role as a Deployment with probes, resources, a grace period and a PDB', () => {
    for (const role of Role.options) {
      const deployment = named<Workload>(manifests, 'Deployment', `orq-${role}`);
      const { template, selector } = deployment.spec;
      expect(selects(selector.matchLabels, template.metadata.labels)).toBe(true);
      const [container] = template.spec.containers;
      const args = container!.args ?? [];
      expect(args.slice(0, 3)).toEqual(['start', '--roles', role]);
      const metricsPort = Number(flag(args, '--metrics-port'));
      const port = container!.ports?.find((p) => p.containerPort === metricsPort);
      expect(port?.name, `${role}: the probes' named port`).toBeDefined();
      expect(container!.readinessProbe?.httpGet).toEqual({ path: '/readyz', port: port!.name });
      expect(container!.livenessProbe?.httpGet).toEqual({ path: '/healthz', port: port!.name });
      expect(container!.resources?.requests).toMatchObject({
        cpu: expect.any(String),
        memory: expect.any(String),
      });
      expect(container!.resources?.limits?.memory).toBeDefined();
      // The kubelet's SIGKILL must come after orq's own shutdown deadline.
      const shutdownMs = Number(flag(args, '--shutdown-timeout'));
      expect(shutdownMs).toBeGreaterThan(0);
      expect(template.spec.terminationGracePeriodSeconds! * 1000).toBeGreaterThan(shutdownMs);
      const env = container!.env ?? [];
      expect(env.find((e) => e.name === 'REDIS_URL')?.valueFrom?.secretKeyRef).toEqual({
        name: 'orq',
        key: 'REDIS_URL',
      });
      expect(container!.envFrom).toContainEqual({ configMapRef: { name: 'orq-env' } });
      // Provider keys come as files (issue 41): an environment stays in /proc/<pid>/environ.
      expect(env.filter((e) => e.valueFrom?.secretKeyRef?.key.endsWith('_API_KEY'))).toEqual([]);
      for (const e of env.filter((e) => e.name.endsWith('_API_KEY_FILE'))) {
        const mount = container!.volumeMounts?.find((m) => e.value?.startsWith(`${m.mountPath}/`));
        const volume = template.spec.volumes?.find((v) => v.name === mount?.name);
        expect(volume?.secret?.secretName, `${role}: ${e.name}`).toBe('orq');
        expect(volume?.secret?.items).toContainEqual({
          key: e.name.replace(/_FILE$/, ''),
          path: e.value!.slice(mount!.mountPath.length + 1),
        });
      }
      const pdbs = of<Manifest & { spec: { selector: { matchLabels: Record<string, string> } } }>(
        manifests,
        'PodDisruptionBudget',
      ).filter((p) => selects(p.spec.selector.matchLabels, template.metadata.labels));
      expect(pdbs.map((p) => p.metadata.name)).toEqual([`orq-${role}`]);
    }
  });

  it('serves the dashboard through a Service, with the API token from the Secret', () => {
    const dashboard = named<Workload>(manifests, 'Deployment', 'orq-dashboard');
    const [container] = dashboard.spec.template.spec.containers;
    expect(container!.args?.[0]).toBe('dashboard');
    expect(flag(container!.args!, '--host')).toBe('0.0.0.0');
    expect(
      container!.env?.find((e) => e.name === 'ORQ_API_TOKEN')?.valueFrom?.secretKeyRef,
    ).toEqual({
      name: 'orq',
      key: 'ORQ_API_TOKEN',
    });
    const service = named<
      Manifest & { spec: { selector: Record<string, string>; ports: { targetPort: string }[] } }
    >(manifests, 'Service', 'orq-dashboard');
    expect(selects(service.spec.selector, dashboard.spec.template.metadata.labels)).toBe(true);
    expect(container!.ports?.map((p) => p.name)).toContain(service.spec.ports[0]!.targetPort);
    const ingress = named<
      Manifest & {
        spec: { rules: { http: { paths: { backend: { service: { name: string } } }[] } }[] };
      }
    >(manifests, 'Ingress', 'orq-dashboard');
    expect(ingress.spec.rules[0]!.http.paths[0]!.backend.service.name).toBe('orq-dashboard');
  });

  it('sets every orq variable of the ConfigMap to a valid configuration value', () => {
    const { data } = named<Manifest & { data: Record<string, string> }>(
      manifests,
      'ConfigMap',
      'orq-env',
    );
    for (const role of Role.options) {
      const value = Number(data[`ORQ__concurrency__${role}`]);
      expect(ConcurrencyConfig.parse({ [role]: value })[role]).toBe(value);
    }
  });

  it("scales each role on its own queue's waiting and running jobs, over its concurrency", () => {
    const { data } = named<Manifest & { data: Record<string, string> }>(
      manifests,
      'ConfigMap',
      'orq-env',
    );
    type Scaled = Manifest & {
      spec: {
        scaleTargetRef: { name: string };
        minReplicaCount: number;
        maxReplicaCount: number;
        triggers: { type: string; metricType: string; metadata: Record<string, string> }[];
      };
    };
    type Hpa = Manifest & {
      spec: {
        scaleTargetRef: { kind: string; name: string };
        minReplicas: number;
        maxReplicas: number;
        metrics: {
          external: {
            metric: { selector: { matchLabels: Record<string, string> } };
            target: { averageValue: string };
          };
        }[];
      };
    };
    const scaled = of<Scaled>(manifests, 'ScaledObject');
    const hpas = of<Hpa>(manifests, 'HorizontalPodAutoscaler');
    // One autoscaler per role, never both kinds on one Deployment.
    expect(scaled.length + hpas.length).toBe(Role.options.length);
    for (const role of Role.options) {
      const target = `ORQ__concurrency__${role}`;
      const so = scaled.find((s) => s.spec.scaleTargetRef.name === `orq-${role}`);
      const hpa = hpas.find((h) => h.spec.scaleTargetRef.name === `orq-${role}`);
      expect([so, hpa].filter(Boolean)).toHaveLength(1);
      if (so) {
        const [trigger] = so.spec.triggers;
        expect(trigger).toMatchObject({ type: 'prometheus', metricType: 'AverageValue' });
        expect(scalerQuery(trigger!.metadata.query!)).toEqual({
          metric: 'orq_queue_jobs',
          queue: ROLE_QUEUE[role],
          states: ['active', 'prioritized', 'waiting'],
        });
        expect(trigger!.metadata.threshold).toBe(data[target]);
        expect(trigger!.metadata.ignoreNullValues).toBe('false');
        expect(so.spec.minReplicaCount).toBeGreaterThanOrEqual(1);
        expect(so.spec.maxReplicaCount).toBeGreaterThan(so.spec.minReplicaCount);
      }
      if (hpa) {
        const [metric] = hpa.spec.metrics;
        expect(metric!.external.metric.selector.matchLabels).toEqual({ queue: ROLE_QUEUE[role] });
        expect(metric!.external.target.averageValue).toBe(data[target]);
        expect(hpa.spec.maxReplicas).toBeGreaterThan(hpa.spec.minReplicas);
      }
      named(manifests, 'Deployment', `orq-${role}`);
    }
  });
});

it('checks ScaledObjects against the vendored KEDA CRD: types, enums and unknown fields', () => {
  const [scaled] = render(join(deployRoot, 'overlays', 'production')).filter(
    (m) => m.kind === 'ScaledObject',
  );
  const spec = scaled!.spec as Record<string, unknown>;
  const broken = {
    ...scaled!,
    spec: { ...spec, pollingIntervall: 15, maxReplicaCount: 'many' },
  } as Manifest;
  expect(kedaCrdErrors([broken])).toEqual([
    'ScaledObject/orq-planner: /spec must NOT have additional properties (pollingIntervall)',
    'ScaledObject/orq-planner: /spec/maxReplicaCount must be integer',
  ]);
});

it('runs Redis for trying out with AOF and noeviction', () => {
  const manifests = render(join(deployRoot, 'overlays', 'try'));
  const redis = named<Workload>(manifests, 'StatefulSet', 'orq-redis');
  const args = redis.spec.template.spec.containers[0]!.args!;
  expect(flag(args, '--appendonly')).toBe('yes');
  expect(flag(args, '--maxmemory-policy')).toBe('noeviction');
  const secret = named<Manifest & { stringData: Record<string, string> }>(
    manifests,
    'Secret',
    'orq',
  );
  const url = new URL(secret.stringData.REDIS_URL!);
  const service = named(manifests, 'Service', url.hostname);
  expect(service).toBeDefined();
});

it('uses the image the overlay names', () => {
  const manifests = render(join(deployRoot, 'overlays', 'production'));
  const images = of<Workload>(manifests, 'Deployment').map(
    (d) => d.spec.template.spec.containers[0]!.image,
  );
  expect(new Set(images)).toEqual(new Set(['registry.example.com/orq:0.1.0']));
});

it("serves the HPAs' external metric from the ScaledObjects' series (prometheus-adapter rule)", () => {
  const values = parse(
    readFileSync(join(deployRoot, 'components', 'hpa', 'prometheus-adapter-values.yaml'), 'utf8'),
  ) as {
    rules: { external: { seriesQuery: string; metricsQuery: string; name: { as: string } }[] };
  };
  const [rule] = values.rules.external;
  const hpas = render(join(deployRoot, 'overlays', 'production-hpa')).filter(
    (m) => m.kind === 'HorizontalPodAutoscaler',
  ) as (Manifest & { spec: { metrics: { external: { metric: { name: string } } }[] } })[];
  expect(new Set(hpas.map((h) => h.spec.metrics[0]!.external.metric.name))).toEqual(
    new Set([rule!.name.as]),
  );
  const [keda] = render(join(deployRoot, 'overlays', 'production')).filter(
    (m) => m.kind === 'ScaledObject',
  ) as (Manifest & { spec: { triggers: { metadata: { query: string } }[] } })[];
  const { metric, states } = scalerQuery(keda!.spec.triggers[0]!.metadata.query);
  // The adapter fills in the series and the HPA's selector (queue="…", namespace="…").
  expect(rule!.seriesQuery.startsWith(`${metric}{`)).toBe(true);
  const filled = rule!.metricsQuery
    .replace('<<.Series>>', metric)
    .replace('<<.LabelMatchers>>', 'queue="plan"');
  const shape =
    /^sum by \(queue\) \(max by \(queue, state\) \((\w+)\{queue="plan",state=~"([\w|]+)"\}\)\)$/;
  const [, series, ruleStates] = shape.exec(filled) ?? [];
  expect(series).toBe(metric);
  expect(ruleStates?.split('|').sort()).toEqual(states);
});

it('refuses a kustomization field it does not render, rather than ignore it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'orq-kustomize-'));
  try {
    writeFileSync(
      join(dir, 'kustomization.yaml'),
      'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: []\nnamespace: orq\n',
    );
    expect(() => render(dir)).toThrow(/namespace/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

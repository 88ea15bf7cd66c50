import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { freePort } from '../../src/shared/redis-server.js';
import { root, spawnOrq, stopProcess, waitForOutput } from '../support/cli.js';
import { render, type Manifest } from '../support/kustomize.js';

// No cluster runs here: each Deployment of deploy/kubernetes runs its container's args as a
// plain `orq` process, with the environment its ConfigMap and Secret give it, against the test
// Redis. Its probes must answer 200 on the port they name, and SIGTERM must stop it cleanly.

interface Container {
  args: string[];
  ports: { name: string; containerPort: number }[];
  env?: { name: string; value?: string; valueFrom?: { secretKeyRef?: { key: string } } }[];
  readinessProbe: { httpGet: { path: string; port: string } };
  livenessProbe: { httpGet: { path: string; port: string } };
}
type Deployment = Manifest & { spec: { template: { spec: { containers: Container[] } } } };

const manifests = render(join(root, 'deploy', 'kubernetes', 'overlays', 'production'));
const deployments = manifests.filter((m): m is Deployment => m.kind === 'Deployment');
const configMap = manifests.find((m) => m.kind === 'ConfigMap' && m.metadata.name === 'orq-env') as
  (Manifest & { data: Record<string, string> }) | undefined;

/** What the Secret `orq` holds in the test: the test Redis and a token. */
const secret = (): Record<string, string> => ({
  REDIS_URL: inject('redisUrl'),
  ORQ_API_TOKEN: 'k8s-test-token-0123456789abcdef',
});

describe('each Deployment, run as its container would', () => {
  it.each(deployments.map((d) => d.metadata.name))(
    '%s starts, answers its probes and stops on SIGTERM',
    async (name) => {
      const deployment = deployments.find((d) => d.metadata.name === name)!;
      const [container] = deployment.spec.template.spec.containers;
      const { args, ports } = container!;
      const probePort = ports.find((p) => p.name === container!.readinessProbe.httpGet.port);
      expect(probePort, 'the probes name a declared port').toBeDefined();
      // Each pod has its port to itself; here they share a machine: a free port each.
      const port = await freePort();
      const local = args.map((arg, i) =>
        arg === String(probePort!.containerPort) && args[i - 1]?.endsWith('-port')
          ? String(port)
          : arg,
      );
      expect(local).not.toEqual(args);
      const env = Object.fromEntries(
        (container!.env ?? []).flatMap((e) => {
          const key = e.valueFrom?.secretKeyRef?.key;
          const value = key ? secret()[key] : e.value;
          return value === undefined ? [] : [[e.name, value]];
        }),
      );
      const child = spawnOrq(local, {
        env: { ...configMap!.data, ...env, ORQ_PREFIX: `k${randomUUID().slice(0, 8)}` },
      });
      try {
        await waitForOutput(
          child,
          args[0] === 'dashboard' ? 'HTTP API on' : 'roles started',
          60_000,
        );
        for (const probe of [container!.readinessProbe, container!.livenessProbe]) {
          const res = await fetch(`http://127.0.0.1:${port}${probe.httpGet.path}`);
          expect(res.status, `${name} ${probe.httpGet.path}`).toBe(200);
        }
      } finally {
        expect(await stopProcess(child), `${name} stops cleanly`).toBe(0);
      }
    },
    90_000,
  );
});

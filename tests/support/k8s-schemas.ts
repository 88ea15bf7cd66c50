import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv, type ValidateFunction } from 'ajv';
import ts from 'typescript';
import { parseAllDocuments } from 'yaml';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { Ingress } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Secret, Service } from 'kubernetes-models/v1';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import type { Manifest } from './kustomize.js';

// Offline validation of rendered manifests against the Kubernetes and KEDA schemas, as published
// on npm by kubernetes-models (Kubernetes' OpenAPI schemas) and @kubernetes-models/keda (KEDA's
// CRD schemas), with nothing else to install and no cluster:
// - types, required fields, enums and formats: each kind's model `validate()` (compiled JSON
//   schema);
// - unknown fields (which `kubectl apply` rejects since 1.27, field validation Strict): those
//   schemas allow any extra field, so each manifest is also type-checked, as an object literal,
//   against the model's TypeScript interface, where an unknown field is an excess property;
// - KEDA's models on npm lag behind KEDA: a ScaledObject is also validated against the CRD of a
//   current KEDA release, vendored in tests/fixtures/kubernetes (its source in its header).

interface Kind {
  model: new (data: never) => { validate(): void };
  /** The module and interface that type the manifest. */
  module: string;
  type: string;
}

const KINDS: Record<string, Kind> = {
  'apps/v1 Deployment': {
    model: Deployment,
    module: 'kubernetes-models/apps/v1',
    type: 'IDeployment',
  },
  'apps/v1 StatefulSet': {
    model: StatefulSet,
    module: 'kubernetes-models/apps/v1',
    type: 'IStatefulSet',
  },
  'autoscaling/v2 HorizontalPodAutoscaler': {
    model: HorizontalPodAutoscaler,
    module: 'kubernetes-models/autoscaling/v2',
    type: 'IHorizontalPodAutoscaler',
  },
  'networking.k8s.io/v1 Ingress': {
    model: Ingress,
    module: 'kubernetes-models/networking.k8s.io/v1',
    type: 'IIngress',
  },
  'policy/v1 PodDisruptionBudget': {
    model: PodDisruptionBudget,
    module: 'kubernetes-models/policy/v1',
    type: 'IPodDisruptionBudget',
  },
  'v1 ConfigMap': { model: ConfigMap, module: 'kubernetes-models/v1', type: 'IConfigMap' },
  'v1 Secret': { model: Secret, module: 'kubernetes-models/v1', type: 'ISecret' },
  'v1 Service': { model: Service, module: 'kubernetes-models/v1', type: 'IService' },
  'keda.sh/v1alpha1 ScaledObject': {
    model: ScaledObject,
    module: '@kubernetes-models/keda/keda.sh/v1alpha1',
    type: 'IScaledObject',
  },
};

const idOf = (m: Manifest) => `${m.kind}/${m.metadata.name}`;

function kindOf(manifest: Manifest): Kind {
  const kind = KINDS[`${manifest.apiVersion} ${manifest.kind}`];
  if (!kind)
    throw new Error(`${idOf(manifest)}: no schema for ${manifest.apiVersion} ${manifest.kind}`);
  return kind;
}

/** Schema errors of each manifest (types, required fields, enums), as `Kind/name: message`. */
export function schemaErrors(manifests: readonly Manifest[]): string[] {
  return manifests.flatMap((manifest) => {
    const { model } = kindOf(manifest);
    try {
      new model(structuredClone(manifest) as never).validate();
      return [];
    } catch (error) {
      return [`${idOf(manifest)}: ${(error as Error).message}`];
    }
  });
}

/**
 * Fields the models' interfaces do not have (and any other type error), as `Kind/name: message`:
 * one TypeScript program checks every manifest as a literal of its kind's interface.
 */
export function unknownFieldErrors(manifests: readonly Manifest[], projectRoot: string): string[] {
  const dir = mkdtempSync(join(projectRoot, 'node_modules', '.orq-k8s-'));
  try {
    const kinds = manifests.map(kindOf);
    const imports = [...new Set(kinds.map((k) => `import type { ${k.type} } from '${k.module}';`))];
    const body = manifests.map(
      (manifest, i) => `export const m${i}: ${kinds[i]!.type} = ${JSON.stringify(manifest)};`,
    );
    const file = join(dir, 'manifests.ts');
    writeFileSync(file, [...imports, ...body].join('\n'));
    const program = ts.createProgram([file], {
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      types: [],
    });
    return ts.getPreEmitDiagnostics(program).map((diagnostic) => {
      const text = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
      const line =
        diagnostic.file && diagnostic.start !== undefined
          ? diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start).line
          : -1;
      const at = line >= imports.length ? idOf(manifests[line - imports.length]!) : 'manifests';
      return `${at}: ${text}`;
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const KEDA_CRD = new URL('../fixtures/kubernetes/keda.sh_scaledobjects.yaml', import.meta.url);

/**
 * A CRD's openAPIV3Schema as the API server applies it on `kubectl apply` (field validation
 * Strict): a field its schema does not list is an error, except under
 * x-kubernetes-preserve-unknown-fields.
 */
export function strictCrdSchema(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(strictCrdSchema);
  if (!schema || typeof schema !== 'object') return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key.startsWith('x-kubernetes-')) continue;
    out[key] =
      key === 'properties'
        ? Object.fromEntries(
            Object.entries(value as object).map(([k, v]) => [k, strictCrdSchema(v)]),
          )
        : strictCrdSchema(value);
  }
  const node = schema as Record<string, unknown>;
  if (node['x-kubernetes-int-or-string']) {
    delete out.type;
    out.anyOf = [{ type: 'integer' }, { type: 'string' }];
  }
  if (
    node.properties &&
    !node['x-kubernetes-preserve-unknown-fields'] &&
    !('additionalProperties' in node)
  ) {
    out.additionalProperties = false;
  }
  return out;
}

let scaledObjectSchema: ValidateFunction | undefined;

function kedaCrdValidator(): ValidateFunction {
  if (scaledObjectSchema) return scaledObjectSchema;
  const crd = parseAllDocuments(readFileSync(KEDA_CRD, 'utf8'))[0]!.toJS() as {
    spec: { versions: { name: string; schema: { openAPIV3Schema: object } }[] };
  };
  const version = crd.spec.versions.find((v) => v.name === 'v1alpha1')!;
  // Formats (int32, …) are the API server's; the types around them are checked here.
  const ajv = new Ajv({ allErrors: true, strict: false, validateFormats: false });
  scaledObjectSchema = ajv.compile(strictCrdSchema(version.schema.openAPIV3Schema) as object);
  return scaledObjectSchema;
}

/** Each ScaledObject's errors against the vendored KEDA CRD, as `Kind/name: path message`. */
export function kedaCrdErrors(manifests: readonly Manifest[]): string[] {
  const validate = kedaCrdValidator();
  return manifests
    .filter((m) => m.apiVersion === 'keda.sh/v1alpha1' && m.kind === 'ScaledObject')
    .flatMap((manifest) =>
      validate(manifest)
        ? []
        : (validate.errors ?? []).map(
            (e) =>
              `${idOf(manifest)}: ${e.instancePath || '/'} ${e.message ?? ''}${
                e.keyword === 'additionalProperties'
                  ? ` (${(e.params as { additionalProperty: string }).additionalProperty})`
                  : ''
              }`,
          ),
    );
}

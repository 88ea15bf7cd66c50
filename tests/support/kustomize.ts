import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { z } from 'zod';

// No kustomize (nor kubectl) binary where the tests run: this renders the subset of a
// Kustomization that deploy/kubernetes uses — resources, components and images — and refuses
// every other field, so an overlay cannot rely on a feature rendered here differently (or not at
// all) from `kubectl apply -k`.

export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

const Image = z.strictObject({
  name: z.string().min(1),
  newName: z.string().min(1).optional(),
  newTag: z.string().min(1).optional(),
});

const Kustomization = z.strictObject({
  apiVersion: z.literal('kustomize.config.k8s.io/v1beta1'),
  kind: z.literal('Kustomization'),
  resources: z.array(z.string()).default([]),
  components: z.array(z.string()).default([]),
  images: z.array(Image).default([]),
});

const Component = z.strictObject({
  apiVersion: z.literal('kustomize.config.k8s.io/v1alpha1'),
  kind: z.literal('Component'),
  resources: z.array(z.string()).default([]),
});

const Resource = z.looseObject({
  apiVersion: z.string().min(1),
  kind: z.string().min(1),
  metadata: z.looseObject({ name: z.string().min(1) }),
});

function readKustomization(dir: string): unknown {
  const file = join(dir, 'kustomization.yaml');
  if (!existsSync(file)) throw new Error(`${dir}: no kustomization.yaml`);
  return parseYaml(file)[0];
}

function parseYaml(file: string): unknown[] {
  return parseAllDocuments(readFileSync(file, 'utf8')).map((doc) => {
    if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors[0]!.message}`);
    return doc.toJS() as unknown;
  });
}

function readResources(dir: string, paths: readonly string[]): Manifest[] {
  return paths.flatMap((path) => {
    const target = resolve(dir, path);
    if (statSync(target).isDirectory()) return render(target);
    return parseYaml(target)
      .filter((doc) => doc !== null)
      .map((doc) => {
        const parsed = Resource.safeParse(doc);
        if (!parsed.success) throw new Error(`${target}: ${parsed.error.issues[0]!.message}`);
        return parsed.data as Manifest;
      });
  });
}

/** The image reference `name[:tag]` with the overlay's `images` entry for `name` applied. */
function setImage(image: string, images: readonly z.infer<typeof Image>[]): string {
  const at = image.lastIndexOf(':');
  const [name, tag] =
    at > image.lastIndexOf('/') ? [image.slice(0, at), image.slice(at + 1)] : [image, undefined];
  const entry = images.find((i) => i.name === name);
  if (!entry) return image;
  const newTag = entry.newTag ?? tag;
  return `${entry.newName ?? name}${newTag ? `:${newTag}` : ''}`;
}

function podSpecs(manifest: Manifest): { containers?: { image?: string }[] }[] {
  const spec = manifest.spec as { template?: { spec?: object } } | undefined;
  return spec?.template?.spec ? [spec.template.spec] : [];
}

/** The manifests `kubectl apply -k dir` would send, in the order kustomize lists them. */
export function render(dir: string): Manifest[] {
  const raw = readKustomization(dir);
  const parsed = Kustomization.safeParse(raw);
  if (!parsed.success) {
    throw new Error(`${join(dir, 'kustomization.yaml')}: ${parsed.error.issues[0]!.message}`);
  }
  const { resources, components, images } = parsed.data;
  const manifests = readResources(dir, resources);
  for (const path of components) {
    const componentDir = resolve(dir, path);
    const component = Component.safeParse(readKustomization(componentDir));
    if (!component.success) {
      throw new Error(`${componentDir}: ${component.error.issues[0]!.message}`);
    }
    manifests.push(...readResources(componentDir, component.data.resources));
  }
  const seen = new Set<string>();
  for (const manifest of manifests) {
    const id = `${manifest.apiVersion}/${manifest.kind}/${manifest.metadata.name}`;
    if (seen.has(id)) throw new Error(`${dir}: ${id} is defined twice`);
    seen.add(id);
    for (const pod of podSpecs(manifest)) {
      for (const container of pod.containers ?? []) {
        if (container.image) container.image = setImage(container.image, images);
      }
    }
  }
  return manifests;
}

/** The directories under `root` with a kustomization.yaml of kind Kustomization. */
export function overlaysUnder(root: string): string[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    const file = join(dir, 'kustomization.yaml');
    if (existsSync(file) && (parseYaml(file)[0] as { kind?: string }).kind === 'Kustomization') {
      found.push(relative(root, dir) || '.');
    }
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) walk(join(dir, entry.name));
    }
  };
  walk(root);
  return found.sort();
}

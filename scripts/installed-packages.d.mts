export interface InstalledPackage {
  name: string;
  version: string;
  /** Its engines.node, when it has one. */
  node?: string;
}

export function installedPackages(dir: string, found?: InstalledPackage[]): InstalledPackage[];

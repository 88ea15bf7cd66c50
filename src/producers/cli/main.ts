#!/usr/bin/env node
// The entry loads nothing else first, so that V8's compile cache (Node 22.1+) is on before the
// CLI's modules load: once it holds them, a pod on Node 24 takes jobs 515 ms after its spawn
// instead of 660 (docs/benchmarks.md). Node 20 has no such API; NODE_DISABLE_COMPILE_CACHE=1
// turns it off.
import module from 'node:module';

(module as { enableCompileCache?: () => unknown }).enableCompileCache?.();
await import('./program.js');

#!/usr/bin/env node
// The entry loads nothing else first, so that V8's compile cache (Node 22.1+) is on before the
// CLI's modules load: once it holds them, a pod on Node 24 takes jobs 515 ms after its spawn
// instead of 660 (docs/benchmarks-history.md). Node 20 has no such API; NODE_DISABLE_COMPILE_CACHE=1
// turns it off.
import module from 'node:module';

(module as { enableCompileCache?: () => unknown }).enableCompileCache?.();
// A pod listens for its stop signal before the rest loads (hundreds of ms): until then a SIGTERM
// would kill it by the signal instead of stopping it.
if (process.argv[2] === 'start') (await import('./stop-signal.js')).listenForStop();
await import('./program.js');

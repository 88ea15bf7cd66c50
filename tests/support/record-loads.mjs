/* global process */
// Loaded with `node --import`: appends the URL of every module the process loads (ESM imports
// and CommonJS requires alike) to the file named by ORQ_TEST_LOADED_FILE, one per line. With
// ORQ_TEST_SIGTERM_AT, the process sends itself SIGTERM when a module whose URL contains it
// loads: a signal at a known point of start-up, however fast the machine.
import { register } from 'node:module';

register('./record-loads-hooks.mjs', import.meta.url, {
  data: { file: process.env.ORQ_TEST_LOADED_FILE, sigtermAt: process.env.ORQ_TEST_SIGTERM_AT },
});

/* global process */
// Loaded with `node --import`: appends the URL of every module the process loads (ESM imports
// and CommonJS requires alike) to the file named by ORQ_TEST_LOADED_FILE, one per line.
import { register } from 'node:module';

register('./record-loads-hooks.mjs', import.meta.url, {
  data: { file: process.env.ORQ_TEST_LOADED_FILE },
});

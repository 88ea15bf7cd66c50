/**
 * The client's public entry: its parts live in ./client/ (index.ts lists them). Everything
 * imported from here before the split still is.
 */
export {
  createClient,
  openClient,
  type CreateClientOptions,
  type OrqClient,
} from './client/index.js';
export { sessionConfig } from './client/session-config.js';
export * from './client/schemas.js';

/** orq's public API. */
export * from './shared/domain/index.js';
export * from './shared/config/schema.js';
export * from './shared/errors.js';

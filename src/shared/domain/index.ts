export * from './task.js';
export * from './plan.js';
export * from './refinement.js';
export * from './session.js';
export * from './history.js';
export * from './result.js';
export * from './human-wait.js';

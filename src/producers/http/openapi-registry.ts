import { z } from 'zod';
import { HistoryEntry } from '../../shared/domain/history.js';
import { SessionResult } from '../../shared/domain/result.js';
import { Session } from '../../shared/domain/session.js';
import { Task } from '../../shared/domain/task.js';
import { ResumeRequest, SubmitRequest } from '../client.js';
import { ApiError } from './errors.js';
import { SessionView, StoredHistoryEntry } from './schemas.js';

type Meta = { id?: string; [key: string]: unknown };
type Registry = z.core.$ZodRegistry<Meta>;

/** A WeakMap that answers from zod's global registry when it has no entry of its own. */
class FallbackToGlobal<K extends object, V> extends WeakMap<K, V> {
  override get(key: K): V | undefined {
    return super.get(key) ?? (z.globalRegistry as unknown as { _map: WeakMap<K, V> })._map.get(key);
  }
  override has(key: K): boolean {
    return super.has(key) || (z.globalRegistry as unknown as { _map: WeakMap<K, V> })._map.has(key);
  }
}

/**
 * The named components of the OpenAPI document. A registry of its own, so the ids never reach
 * zod's global registry (the config JSON Schema and the LLM reply schemas are generated from
 * it); it reads `.describe()` texts from the global one, which zod keeps in `_map` (the same
 * internal fastify-type-provider-zod copies registries through).
 */
export function openApiRegistry(): Registry {
  const registry = z.registry<Meta>();
  (registry as unknown as { _map: WeakMap<object, Meta> })._map = new FallbackToGlobal();
  const components: [z.ZodType, string][] = [
    [Session, 'Session'],
    [Task, 'Task'],
    [HistoryEntry, 'HistoryEntry'],
    [StoredHistoryEntry, 'StoredHistoryEntry'],
    [SessionView, 'SessionView'],
    [SessionResult, 'SessionResult'],
    [SubmitRequest, 'SubmitRequest'],
    [ResumeRequest, 'ResumeRequest'],
    [ApiError, 'ApiError'],
  ];
  for (const [schema, id] of components) {
    registry.add(schema, { ...z.globalRegistry.get(schema), id });
  }
  return registry;
}

// orq as a library: submit a session, follow its history, wait for the outcome.
// Run it with REDIS_URL pointing at a Redis (default redis://127.0.0.1:6379). The roles run in
// this process with the builtin provider, which is deterministic and needs no API key; in
// production they run in `orq start` pods instead, and this process keeps only the client.
import { pino } from 'pino';
import { createClient, parseConfig, startRoles } from 'orq';

const connection = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

const roles = await startRoles({
  roles: ['planner', 'judge', 'worker', 'replanner', 'coordinator'],
  connection,
  config: parseConfig({}),
  logger: pino({ level: 'warn' }),
});
const orq = await createClient({ connection });

try {
  // The idempotency key makes a retried submit return the same session, not a second one.
  const session = await orq.submit({ instruction: 'Implement login', idempotencyKey: 'ticket-7' });
  for await (const { entry } of orq.watch(session.id)) console.log(entry.type);

  const { session: done, tasks } = await orq.wait(session.id, { timeoutMs: 60_000 });
  console.log(`session ${done.id}: ${done.state}, ${tasks.length} task(s)`);
  for (const task of tasks) console.log(`- ${task.title}: ${task.state}`);

  // What the session produced: its final tasks' outputs as one text.
  const result = await orq.result(session.id);
  console.log(result.text);
  if (!result.complete) console.warn(result.notes.join('\n'));
} finally {
  await orq.close();
  await roles.close();
}

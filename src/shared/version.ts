import { readFileSync } from 'node:fs';

/** orq's version, from its package.json: src/ and dist/ both sit two levels below it. */
export const ORQ_VERSION: string = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  }
).version;

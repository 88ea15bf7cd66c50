// Every test file runs git as a pod does (the machines the tests run on have a global identity,
// a pod has none): no global or system git config, no identity in the environment. Set for the
// test processes and so for every process they start. A test that wants an identity sets it
// itself, in the repository or on the command line (tests/support/git.ts).
process.env.GIT_CONFIG_GLOBAL = '/dev/null';
process.env.GIT_CONFIG_NOSYSTEM = '1';
for (const name of [
  'GIT_AUTHOR_NAME',
  'GIT_AUTHOR_EMAIL',
  'GIT_COMMITTER_NAME',
  'GIT_COMMITTER_EMAIL',
  'EMAIL',
]) {
  delete process.env[name];
}

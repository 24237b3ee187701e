// The sandbox of a run through the router and E2B's control plane (run-tests.sh does this when
// SANDBOXD_E2B_TEMPLATE is set; the JS twin of test/e2b/conftest.py's routed_sandbox):
//
//   node routed.mjs create     Sandbox.create(SANDBOXD_E2B_TEMPLATE), prints the sandbox's ID
//   node routed.mjs kill ID    kills it through the SDK and checks what follows: kill answers
//                              true, isRunning false, a command and a connect are the SDK's errors
//
// Exits non-zero, saying why, when a check fails.

import assert from 'node:assert/strict'

import { e2b } from './harness.mjs'

const { Sandbox, SandboxError, NotFoundError } = e2b

async function create() {
  const template = process.env.SANDBOXD_E2B_TEMPLATE
  assert.ok(template, 'SANDBOXD_E2B_TEMPLATE is not set')
  const sbx = await Sandbox.create(template, { timeoutMs: 600_000 })
  process.stdout.write(`${sbx.sandboxId}\n`)
}

async function kill(id) {
  const sbx = await Sandbox.connect(id)
  assert.equal(await sbx.kill(), true, 'kill answered false')
  assert.equal(await sbx.isRunning(), false, 'isRunning after the kill')
  // The router's 502 "... was not found" for envd traffic to a sandbox that is gone.
  await assert.rejects(sbx.commands.run('true'), (e) => e instanceof SandboxError, 'a command after the kill')
  await assert.rejects(Sandbox.connect(id), (e) => e instanceof NotFoundError, 'connect after the kill')
  assert.equal(await Sandbox.kill(id), false, 'a second kill')
  process.stdout.write(`routed sandbox ${id}: killed, and gone\n`)
}

const [verb, id] = process.argv.slice(2)
if (verb === 'create') await create()
else if (verb === 'kill' && id) await kill(id)
else throw new Error('usage: node routed.mjs create | kill ID')

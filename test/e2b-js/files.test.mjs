// sandbox.files of the unmodified e2b JavaScript SDK against sandboxd's E2B port, directly or
// through the router (the JS twin of test/e2b/test_files.py): write / read / list / exists / getInfo / remove / rename /
// makeDir / watchDir, several files in one upload, 100 MiB each way, the SDK's own errors.
// Paths are the sandbox's absolute ones (here, this machine's).

import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import {
  chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync,
  symlinkSync, unlinkSync, writeFileSync, createReadStream,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, afterEach, before, beforeEach, test } from 'node:test'

import { ROUTED, e2b, openSandbox, stillUp, waitUntil } from './harness.mjs'

const { FileNotFoundError, NotFoundError, InvalidArgumentError, SandboxError, FileType, FilesystemEventType: T } = e2b
const MIB = 1 << 20

let daemon, sbx, tmp
before(async () => {
  ({ daemon, sbx } = await openSandbox())
})
after(async () => {
  await daemon?.stop()
})
// A directory of each test's own, readable by anyone.
beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'e2b-js-files-'))
  chmodSync(tmp, 0o755)
})
afterEach(async () => {
  rmSync(tmp, { recursive: true, force: true })
  assert.ok(await stillUp(daemon, sbx))
})

test('write, read (text, bytes, blob, stream), exists, getInfo', async () => {
  const p = join(tmp, 'new', 'deeper', 'hello.txt')
  const info = await sbx.files.write(p, 'hello, world\n')
  assert.equal(info.path, p)
  assert.equal(info.name, 'hello.txt')
  assert.equal(readFileSync(p, 'utf8'), 'hello, world\n')
  assert.equal(await sbx.files.read(p), 'hello, world\n')
  assert.equal(Buffer.from(await sbx.files.read(p, { format: 'bytes' })).toString(), 'hello, world\n')
  assert.equal(await (await sbx.files.read(p, { format: 'blob' })).text(), 'hello, world\n')
  const chunks = []
  for await (const c of await sbx.files.read(p, { format: 'stream' })) chunks.push(Buffer.from(c))
  assert.equal(Buffer.concat(chunks).toString(), 'hello, world\n')
  assert.equal(await sbx.files.exists(p), true)
  assert.equal(await sbx.files.exists(join(tmp, 'nothing')), false)
  const e = await sbx.files.getInfo(p)
  assert.equal(e.type, FileType.FILE)
  assert.equal(e.size, 13)
  assert.equal(e.permissions, '-rw-r--r--')
  assert.equal(e.name, 'hello.txt')
  assert.equal(e.path, p)
  assert.equal(e.owner, process.getuid() === 0 ? 'root' : e.owner)
  assert.ok(e.modifiedTime instanceof Date)
  symlinkSync(p, join(tmp, 'link'))
  const l = await sbx.files.getInfo(join(tmp, 'link'))
  assert.equal(l.symlinkTarget, p)
  assert.ok(l.permissions.startsWith('L'), l.permissions)
})

test('write of binary data: ArrayBuffer, Blob; gzip both ways', async () => {
  const bin = new Uint8Array([0, 1, 2, 255, 254])
  await sbx.files.write(join(tmp, 'a.bin'), bin.buffer)
  assert.deepEqual([...readFileSync(join(tmp, 'a.bin'))], [...bin])
  await sbx.files.write(join(tmp, 'b.bin'), new Blob([bin]))
  assert.deepEqual([...readFileSync(join(tmp, 'b.bin'))], [...bin])
  const text = 'compressible '.repeat(10000)
  const p = join(tmp, 'z', 'gz.txt')
  assert.equal((await sbx.files.write(p, text, { gzip: true })).path, p)
  assert.equal(readFileSync(p, 'utf8'), text)
  assert.equal(await sbx.files.read(p, { gzip: true }), text)
})

test('write with useOctetStream; read a stream with gzip', async () => {
  const p = join(tmp, 'oc')
  await sbx.files.write(p, 'octet', { useOctetStream: true })
  assert.equal(readFileSync(p, 'utf8'), 'octet')
  const chunks = []
  for await (const c of await sbx.files.read(p, { format: 'stream', gzip: true })) chunks.push(Buffer.from(c))
  assert.equal(Buffer.concat(chunks).toString(), 'octet')
})

// A sandbox made through a control plane has an access token, with which the SDK signs its
// file URLs: sandboxd does not take signatures (yet).
test('uploadUrl and downloadUrl (unsigned: no access token) work with plain fetch', {
  skip: ROUTED && 'the sandbox has an access token: the SDK signs the URLs, which sandboxd does not support',
}, async () => {
  const p = join(tmp, 'via-url')
  const form = new FormData()
  form.append('file', new Blob(['by url']), 'via-url')
  const up = await fetch(await sbx.uploadUrl(p), { method: 'POST', body: form })
  assert.equal(up.status, 200)
  assert.equal(readFileSync(p, 'utf8'), 'by url')
  const down = await fetch(await sbx.downloadUrl(p))
  assert.deepEqual([down.status, await down.text()], [200, 'by url'])
})

test('write of several files in one upload', async () => {
  const infos = await sbx.files.write([
    { path: join(tmp, 'a.txt'), data: 'A' },
    { path: join(tmp, 'sub', 'b.bin'), data: new Uint8Array([0, 1, 66]).buffer },
  ])
  assert.deepEqual(infos.map((i) => i.path).sort(), [join(tmp, 'a.txt'), join(tmp, 'sub', 'b.bin')])
  assert.equal(readFileSync(join(tmp, 'a.txt'), 'utf8'), 'A')
  assert.deepEqual([...readFileSync(join(tmp, 'sub', 'b.bin'))], [0, 1, 66])
})

test('write with metadata; getInfo and list show it', async () => {
  const p = join(tmp, 'm')
  const info = await sbx.files.write(p, 'x', { metadata: { Owner: 'team-a', stage: 'raw data' } })
  assert.deepEqual(info.metadata, { owner: 'team-a', stage: 'raw data' }) // keys lowercased
  assert.deepEqual((await sbx.files.getInfo(p)).metadata, { owner: 'team-a', stage: 'raw data' })
  assert.deepEqual((await sbx.files.list(tmp)).map((e) => e.metadata), [{ owner: 'team-a', stage: 'raw data' }])
})

test('list with depth', async () => {
  mkdirSync(join(tmp, 'd', 'e'), { recursive: true })
  writeFileSync(join(tmp, 'd', 'e', 'f'), 'f')
  writeFileSync(join(tmp, 'g'), 'g')
  const one = await sbx.files.list(tmp)
  assert.deepEqual(one.map((e) => [e.name, e.type]), [['d', FileType.DIR], ['g', FileType.FILE]])
  const three = await sbx.files.list(tmp, { depth: 3 })
  assert.deepEqual(three.map((e) => e.path),
    [join(tmp, 'd'), join(tmp, 'd', 'e'), join(tmp, 'd', 'e', 'f'), join(tmp, 'g')])
})

test('makeDir, rename, remove', async () => {
  const d = join(tmp, 'x', 'y')
  assert.equal(await sbx.files.makeDir(d), true)
  assert.equal(await sbx.files.makeDir(d), false) // already there
  assert.ok(statSync(d).isDirectory())
  writeFileSync(join(d, 'f'), 'f')
  const moved = await sbx.files.rename(join(tmp, 'x'), join(tmp, 'moved', 'here'))
  assert.equal(moved.path, join(tmp, 'moved', 'here'))
  assert.equal(readFileSync(join(tmp, 'moved', 'here', 'y', 'f'), 'utf8'), 'f')
  await sbx.files.remove(join(tmp, 'moved'))
  assert.equal(existsSync(join(tmp, 'moved')), false)
  await sbx.files.remove(join(tmp, 'moved')) // nothing there: no error, as envd
})

test('errors are the SDK\'s own: FileNotFoundError, InvalidArgumentError', async () => {
  const missing = join(tmp, 'missing')
  const notFound = (e) => e instanceof FileNotFoundError && e instanceof NotFoundError
  await assert.rejects(sbx.files.read(missing), notFound)
  await assert.rejects(sbx.files.getInfo(missing), notFound)
  await assert.rejects(sbx.files.list(missing), notFound)
  await assert.rejects(sbx.files.rename(missing, join(tmp, 'other')), notFound)
  await assert.rejects(sbx.files.watchDir(missing, () => {}), notFound)
  writeFileSync(join(tmp, 'file'), 'x')
  const invalid = (e) => e instanceof InvalidArgumentError
  await assert.rejects(sbx.files.list(join(tmp, 'file')), invalid)
  await assert.rejects(sbx.files.read(tmp), invalid) // a directory
  await assert.rejects(sbx.files.makeDir(join(tmp, 'file')), invalid)
  await assert.rejects(sbx.files.watchDir(join(tmp, 'file'), () => {}), invalid)
  await assert.rejects(sbx.files.write(join(tmp, 'file', 'under'), 'x'), invalid) // a file as a parent
  await assert.rejects(sbx.files.list(tmp, { depth: 0 }), invalid) // the SDK's own check
})

test('another user\'s permissions', { skip: process.getuid() !== 0 && 'switching users needs root' }, async () => {
  const priv = join(tmp, 'private')
  mkdirSync(priv, { mode: 0o700 })
  writeFileSync(join(priv, 'secret'), 's')
  await assert.rejects(sbx.files.read(join(priv, 'secret'), { user: 'nobody' }), (e) => e instanceof SandboxError)
  await assert.rejects(sbx.files.list(priv, { user: 'nobody' }), (e) => e instanceof SandboxError)
  chmodSync(tmp, 0o777)
  await sbx.files.write(join(tmp, 'mine'), 'n', { user: 'nobody' })
  assert.equal((await sbx.files.getInfo(join(tmp, 'mine'))).owner, 'nobody')
})

test('watchDir: create, write, rename, remove events, recursive', async () => {
  const events = []
  const h = await sbx.files.watchDir(tmp, (ev) => { events.push(ev) }, { recursive: true })
  try {
    writeFileSync(join(tmp, 'a'), '1')
    renameSync(join(tmp, 'a'), join(tmp, 'b'))
    mkdirSync(join(tmp, 'sub'))
    writeFileSync(join(tmp, 'sub', 'c'), '2')
    unlinkSync(join(tmp, 'b'))
    const kinds = () => events.map((e) => `${e.name}:${e.type}`)
    // sub/c's write may come before sub is watched (inotify's race, envd's too): not waited for.
    await waitUntil(() => kinds().includes(`b:${T.REMOVE}`) && kinds().includes(`sub/c:${T.CREATE}`),
      20_000, () => `the watch events (seen: ${kinds()})`)
    for (const want of [['a', T.CREATE], ['a', T.WRITE], ['a', T.RENAME], ['b', T.CREATE],
      ['sub', T.CREATE], ['sub/c', T.CREATE], ['b', T.REMOVE]]) {
      assert.ok(kinds().includes(want.join(':')), `${want} not in ${kinds()}`)
    }
  } finally {
    await h.stop()
  }
})

test('watchDir with includeEntry; onExit runs when it stops', async () => {
  const events = []
  let exited = false
  const h = await sbx.files.watchDir(tmp, (ev) => { events.push(ev) }, {
    includeEntry: true, timeoutMs: 0, onExit: () => { exited = true },
  })
  writeFileSync(join(tmp, 'streamed'), 'x')
  await waitUntil(() => events.some((e) => e.name === 'streamed' && e.type === T.WRITE), 20_000, 'a write event')
  const created = events.find((e) => e.name === 'streamed' && e.type === T.CREATE)
  assert.ok(created, JSON.stringify(events))
  assert.equal(created.entry?.path, join(tmp, 'streamed'))
  await h.stop()
  await waitUntil(() => exited, 10_000, 'onExit')
})

test('read of a file without a size (procfs): all of it', async () => {
  assert.equal(await sbx.files.read('/proc/version'), readFileSync('/proc/version', 'utf8'))
  writeFileSync(join(tmp, 'empty'), '')
  assert.equal(await sbx.files.read(join(tmp, 'empty')), '')
})

// 100 MiB of a known pattern, made in pieces (never whole in memory), hashed as it goes.
function pattern(size) {
  const hash = createHash('sha256')
  let left = size
  let i = 0
  const stream = new ReadableStream({
    pull(controller) {
      if (left === 0) return controller.close()
      const n = Math.min(left, MIB)
      const block = new Uint8Array(n)
      for (let k = 0; k < n; k++) block[k] = (i + k) % 251
      i++
      left -= n
      hash.update(block)
      controller.enqueue(block)
    },
  })
  return { stream, digest: () => hash.digest('hex') }
}

async function fileDigest(p) {
  const h = createHash('sha256')
  for await (const c of createReadStream(p)) h.update(c)
  return h.digest('hex')
}

test('upload of 100 MiB, streamed (octet-stream), and back as a stream', async () => {
  const src = pattern(100 * MIB)
  const p = join(tmp, 'big.bin')
  const info = await sbx.files.write(p, src.stream)
  assert.equal(info.path, p)
  assert.equal(statSync(p).size, 100 * MIB)
  const want = src.digest()
  assert.equal(await fileDigest(p), want)
  const h = createHash('sha256')
  let n = 0
  for await (const c of await sbx.files.read(p, { format: 'stream' })) {
    h.update(c)
    n += c.length
  }
  assert.equal(n, 100 * MIB)
  assert.equal(h.digest('hex'), want)
})

test('upload of 100 MiB as multipart (an ArrayBuffer)', async () => {
  const data = new Uint8Array(100 * MIB)
  for (let k = 0; k < data.length; k += 4096) data[k] = (k >> 12) % 256
  const p = join(tmp, 'big-multipart.bin')
  await sbx.files.write(p, data.buffer)
  assert.equal(await fileDigest(p), createHash('sha256').update(data).digest('hex'))
})

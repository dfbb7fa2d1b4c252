#!/usr/bin/env node
// tap-summary.js RESULTS_DIR — TAP-13 consumer for tests/compliance/run.sh.
//
// Parses RESULTS_DIR/<program>.tap for every program listed (in order) in
// RESULTS_DIR/programs.list with node-tap's tap-parser (found through
// NODE_TAP_PREFIX or NODE_PATH) and writes:
//   stdout                  per-program lines + totals
//   RESULTS_DIR/summary.json
//   RESULTS_DIR/not-ok.txt   every failing assertion with its reason
//
// "passed" = ok test points that are not # SKIP (what node-tap calls pass
// minus skip); --min-ok in run.sh compares against it.
//
// programs.list lines: "<name> <exit-code> <seconds> <timed-out 0|1>"
'use strict'
const fs = require('fs')
const path = require('path')

function loadParser () {
  const tries = []
  if (process.env.NODE_TAP_PREFIX)
    tries.push(path.join(process.env.NODE_TAP_PREFIX, 'node_modules', 'tap-parser'))
  tries.push('tap-parser')
  for (const t of tries) {
    try { return require(t) } catch (e) {}
  }
  console.error('tap-summary.js: cannot load tap-parser (run scripts/setup-deps.sh)')
  process.exit(2)
}
const Parser = loadParser()

const dir = process.argv[2]
if (!dir) {
  console.error('usage: tap-summary.js RESULTS_DIR')
  process.exit(2)
}

function oneLine (s, max) {
  s = String(s).replace(/\s+/g, ' ').trim()
  return s.length > max ? s.slice(0, max - 3) + '...' : s
}

// A short human reason for a failing assertion, from its YAML diagnostic.
function reason (diag) {
  if (!diag || typeof diag !== 'object') return ''
  const parts = []
  if (diag.error) parts.push(oneLine(diag.error, 300))
  if (diag.stderr) parts.push('stderr: ' + oneLine(diag.stderr, 300))
  if ('expected' in diag || 'actual' in diag)
    parts.push('expected ' + oneLine(JSON.stringify(diag.expected), 120) +
               ', got ' + oneLine(JSON.stringify(diag.actual), 120))
  if (!parts.length && diag.reference) parts.push('ref ' + diag.reference)
  if (!parts.length) parts.push(oneLine(JSON.stringify(diag), 300))
  return parts.join('; ')
}

// runtime-tools programs sometimes report a failure only as a YAML block
// with an "error" key that follows no test point (e.g. hooks, prestart:
// "TAP version 13 / --- {error: ...} ... / 1..0"). TAP consumers ignore
// those; we surface them as program-level errors.
function orphanErrors (text) {
  const out = []
  const lines = text.split('\n')
  let owner = false // is there a test point a YAML block could belong to?
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i]
    if (/^(not )?ok\b/.test(l)) { owner = true; continue }
    if (/^(TAP version|\d+\.\.\d+)/.test(l)) { owner = false; continue }
    if (/^\s+---\s*$/.test(l)) {
      let j = i + 1
      const block = []
      while (j < lines.length && !/^\s+\.\.\.\s*$/.test(lines[j])) block.push(lines[j++])
      if (!owner) {
        const m = block.join('\n').match(/"error":\s*"((?:[^"\\]|\\.)*)"/)
        if (m) {
          let msg = m[1]
          try { msg = JSON.parse('"' + m[1] + '"') } catch (e) {}
          out.push(msg.split('\n')[0])
        }
      }
      owner = false // one YAML block per test point
      i = j
    }
  }
  return out
}

// "# ..." comment lines that follow each test point, by test id (tap-go's
// t.Diagnostic output: the only reason some failures give).
function commentsById (text) {
  const m = new Map()
  let id = null
  for (const l of text.split('\n')) {
    const a = l.match(/^(?:not )?ok (\d+)\b/)
    if (a) { id = Number(a[1]); continue }
    if (/^\d+\.\.\d+/.test(l)) { id = null; continue }
    if (id !== null && /^#/.test(l)) {
      if (!m.has(id)) m.set(id, [])
      m.get(id).push(l.replace(/^#\s*/, ''))
    }
  }
  return m
}

function parseOne (file) {
  return new Promise(resolve => {
    const asserts = []
    const p = new Parser({ passes: true }, results => resolve({ results, asserts }))
    p.on('assert', res => asserts.push(res))
    let data = ''
    try { data = fs.readFileSync(file, 'utf8') } catch (e) {}
    p.end(data)
  })
}

async function main () {
  const list = fs.readFileSync(path.join(dir, 'programs.list'), 'utf8')
    .split('\n').filter(Boolean).map(l => {
      const [name, rc, secs, to] = l.split(/\s+/)
      return { name, rc: Number(rc), secs: Number(secs), timedOut: to === '1' }
    })
  const tot = { pass: 0, ok: 0, notOk: 0, skip: 0, todo: 0, programs: list.length, incomplete: 0, orphanErrors: 0, seconds: 0 }
  const progs = []
  const notOkLines = []
  const w = Math.max(10, ...list.map(p => p.name.length))
  for (const prog of list) {
    const { results, asserts } = await parseOne(path.join(dir, prog.name + '.tap'))
    const r = { name: prog.name, pass: 0, ok: 0, notOk: 0, skip: 0, todo: 0, exit: prog.rc,
                seconds: prog.secs, timedOut: prog.timedOut, problems: [], failures: [] }
    let raw = ''
    try { raw = fs.readFileSync(path.join(dir, prog.name + '.tap'), 'utf8') } catch (e) {}
    let errTail = ''
    try {
      errTail = fs.readFileSync(path.join(dir, prog.name + '.stderr'), 'utf8').trim().split('\n').slice(-3).join(' | ')
    } catch (e) {}
    const comments = commentsById(raw)
    for (const a of asserts) {
      if (a.todo) { r.todo++; continue }
      if (a.ok) { r.ok++; if (a.skip) r.skip++; else r.pass++; continue }
      r.notOk++
      let why = reason(a.diag)
      if (!why && comments.has(a.id)) why = oneLine(comments.get(a.id).join('; '), 300)
      if (!why && errTail) why = 'program stderr: ' + oneLine(errTail, 300)
      r.failures.push({ id: a.id, name: a.name, reason: why })
      notOkLines.push(`${prog.name}: not ok ${a.id} - ${a.name}` + (why ? `\n    ${why}` : ''))
    }
    // Program-level problems: the TAP stream did not complete cleanly.
    if (prog.timedOut) r.problems.push('TIMEOUT')
    for (const f of results.failures || []) {
      if (typeof f.tapError === 'string' && !r.problems.includes(f.tapError))
        r.problems.push(f.tapError)
    }
    if (prog.rc !== 0 && !prog.timedOut) r.problems.push('exit ' + prog.rc)
    r.orphanErrors = orphanErrors(raw)
    if (r.orphanErrors.length) {
      r.problems.push('error outside test points')
      tot.orphanErrors += r.orphanErrors.length
    }
    if (r.problems.length) {
      tot.incomplete++
      const tail = errTail
      notOkLines.push(`${prog.name}: PROGRAM ${r.problems.join(', ')}` +
        r.orphanErrors.map(e => `\n    error: ${oneLine(e, 300)}`).join('') +
        (tail ? `\n    stderr: ${oneLine(tail, 400)}` : ''))
    }
    tot.pass += r.pass; tot.ok += r.ok; tot.notOk += r.notOk; tot.skip += r.skip; tot.todo += r.todo
    tot.seconds += prog.secs
    progs.push(r)
    const flag = r.problems.length ? '  [' + r.problems.join(', ') + ']' : ''
    console.log(`  ${prog.name.padEnd(w)}  pass ${String(r.pass).padStart(4)}  not ok ${String(r.notOk).padStart(3)}` +
                `  skip ${String(r.skip).padStart(4)}  ${String(prog.secs).padStart(4)}s${flag}`)
  }
  console.log('')
  console.log(`TOTAL: ${tot.pass} passed, ${tot.notOk} not ok, ${tot.skip} skipped (${tot.ok} "ok" lines)` +
              (tot.todo ? `, ${tot.todo} todo` : '') +
              ` — ${tot.programs} programs, ${tot.incomplete} did not complete cleanly` +
              (tot.orphanErrors ? ` (${tot.orphanErrors} errors reported outside test points)` : '') +
              `, ${tot.seconds}s`)
  fs.writeFileSync(path.join(dir, 'summary.json'), JSON.stringify({ totals: tot, programs: progs }, null, 2) + '\n')
  fs.writeFileSync(path.join(dir, 'not-ok.txt'), notOkLines.join('\n') + (notOkLines.length ? '\n' : ''))
}

main().catch(e => { console.error('tap-summary.js:', e && e.stack || e); process.exit(2) })

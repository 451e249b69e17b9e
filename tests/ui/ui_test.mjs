// The dashboard in a real browser (Debian's chromium, headless, driven by
// playwright-core).  Started by tests/integration/check_ui.c, which runs a
// real lessor and lessee and enqueued RUN_ID, a job printing a line every
// 200 ms, and is running now.  Requeue and then cancel it from its page:
//
//   node tests/ui/ui_test.mjs URL TOKEN RUN_ID
//
// env: UI_NODE_MODULES (where playwright-core is installed), CHROMIUM (the
// browser, default /usr/bin/chromium), UI_SCREENSHOT_DIR (ui.png, ui-run.png).
// Exit 0 when every check passed, 1 otherwise (with the reason and a
// screenshot of the moment, fail.png).
import { createRequire } from 'node:module';
import path from 'node:path';

const [url, token, runId] = process.argv.slice(2);
if (!url || !token || !runId) {
  console.error('usage: ui_test.mjs URL TOKEN RUN_ID');
  process.exit(2);
}
const require = createRequire(path.join(process.env.UI_NODE_MODULES || '.', 'node_modules', '.'));
const { chromium } = require('playwright-core');
const shots = process.env.UI_SCREENSHOT_DIR || '.';
const TIMEOUT = 30000 * Number(process.env.CK_TIMEOUT_MULTIPLIER || 1);

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
  console.log('ok: ' + what);
}

async function logLines(page) {
  const t = await page.textContent('#r-log');
  return t.split('\n').filter((l) => l.startsWith('tick ')).length;
}

// Waits until the page's log shows more tick lines than `than`, without
// reloading: only the page's own refresh can make it grow.
async function waitLogGrows(page, than) {
  await page.waitForFunction((n) => {
    const t = document.getElementById('r-log').textContent;
    return t.split('\n').filter((l) => l.startsWith('tick ')).length > n;
  }, than, { timeout: TIMEOUT, polling: 50 });
  return logLines(page);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  timeout: TIMEOUT,
});
const page = await browser.newPage({ viewport: { width: 1200, height: 400 } });
page.setDefaultTimeout(TIMEOUT);
const problems = [];
page.on('pageerror', (e) => problems.push('page error: ' + e.message));
page.on('response', (r) => {
  if (r.status() >= 400 && !(r.status() === 401 && r.url().endsWith('/v1/stats')))
    problems.push(`HTTP ${r.status()} for ${r.url()}`);
});
page.on('console', (m) => {
  // failed loads are checked by URL above (the unauthenticated probe before
  // sign-in and the wrong token are 401s on /v1/stats)
  if (m.type() === 'error' && !/Failed to load resource/.test(m.text()))
    problems.push('console error: ' + m.text());
});
let failed = false;
try {
  const resp = await page.goto(url + '/ui/');
  check(resp.status() === 200, 'GET /ui/ answers 200');
  check(/default-src 'self'/.test(resp.headers()['content-security-policy'] || ''),
    "the page has a Content-Security-Policy with default-src 'self'");

  // sign in: a wrong token is refused, the right one kept for the session
  await page.waitForSelector('#view-login:not([hidden])');
  await page.fill('#token', 'not-the-token-at-all');
  await page.click('#login');
  await page.waitForFunction(() => /Wrong token/.test(document.getElementById('login-error').textContent));
  check(true, 'a wrong token is refused');
  await page.fill('#token', token);
  await page.click('#login');

  // the run enqueued through the API is in the list, running
  const row = `#runs tr[data-id="${runId}"]`;
  await page.waitForSelector(row);
  await page.waitForFunction((sel) => document.querySelector(sel + ' td.status').textContent === 'running', row);
  check(true, `run ${runId} is listed as running`);
  check(/exit 3/.test(await page.textContent('#runs tbody')), 'the failed run says why: exit 3');
  check(await page.evaluate(() => sessionStorage.getItem('lessor.admin_token')) === token,
    'the token is kept in sessionStorage');
  await page.waitForFunction(() => document.querySelectorAll('#runs tbody tr').length >= 4);
  await page.screenshot({ path: path.join(shots, 'ui.png'), fullPage: true });

  // filters: status=running keeps it, status=succeeded drops it
  await page.selectOption('#f-status', 'succeeded');
  await page.waitForFunction((sel) => !document.querySelector(sel) &&
    document.querySelectorAll('#runs tbody tr').length > 0, row);
  await page.selectOption('#f-status', 'running');
  await page.waitForSelector(row);
  check(true, 'the status filter works');
  await page.selectOption('#f-status', '');

  // workers and stats pages
  await page.click('header nav a[data-view="workers"]');
  await page.waitForFunction(() => /ui-worker/.test(document.querySelector('#workers tbody').textContent));
  check(true, 'the worker is listed with its last contact');
  await page.click('header nav a[data-view="stats"]');
  await page.waitForFunction(() => /ticker/.test(document.querySelector('#stats-wf tbody').textContent));
  check(true, 'stats by workflow');
  await page.click('header nav a[data-view="runs"]');

  // the run's page: its log tail grows while it runs
  await page.click(`${row} a`);
  await page.waitForFunction((id) => document.getElementById('r-id').textContent === id, runId);
  await page.waitForFunction(() => /ticker/.test(document.getElementById('r-input').textContent));
  await page.waitForFunction(() => document.querySelectorAll('#r-leases tbody tr').length === 1);
  check(/held/.test(await page.textContent('#r-leases tbody')), 'the lease history shows the held lease');
  const n0 = await logLines(page);
  const n1 = await waitLogGrows(page, n0);
  const n2 = await waitLogGrows(page, n1);
  check(n2 > n1 && n1 > n0, `the log tail grows live (${n0} -> ${n1} -> ${n2} lines)`);
  await page.screenshot({ path: path.join(shots, 'ui-run.png'), fullPage: true });

  // requeue from the page: the lease is revoked, the worker claims it again
  page.once('dialog', (d) => d.accept());
  await page.click('#r-requeue');
  await page.waitForFunction(() => {
    const rows = document.querySelectorAll('#r-leases tbody tr');
    return rows.length === 2 && /revoked/.test(rows[0].textContent) &&
      /held/.test(rows[1].textContent);
  });
  check(true, 'requeue from the page: the first lease revoked, a second one held');
  await page.waitForFunction(() => document.getElementById('r-status').textContent === 'running');
  check(await page.isHidden('#r-cancel-requested'), 'no cancel requested yet');
  // cancel from the page: confirm, then the worker stops it
  page.once('dialog', (d) => d.accept());
  await page.click('#r-cancel');
  await page.waitForFunction(() => document.getElementById('r-status').textContent === 'cancelled');
  check(true, 'cancel from the page: the run ends cancelled');
  const lease = await page.textContent('#r-leases tbody');
  check(!/held/.test(lease), 'the lease ended');
  check(problems.length === 0, 'no page errors and no CSP violations' +
    (problems.length ? ': ' + problems.join('; ') : ''));
} catch (err) {
  failed = true;
  console.error('ui_test: ' + err.message);
  if (problems.length) console.error(problems.join('\n'));
  await page.screenshot({ path: path.join(shots, 'fail.png') }).catch(() => {});
}
await browser.close();
process.exit(failed ? 1 : 0);

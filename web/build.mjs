// Builds web/dist/index.html, the single file the server embeds. esbuild
// bundles src/main.js and src/style.css (minified); both are inlined into
// src/index.html with a Content-Security-Policy that allows exactly these two
// inline blocks and same-origin API calls; the page is stamped with the hash
// of its sources, which tests/web/check_bundle.cmake recomputes without Node
// to catch a stale bundle. The same inputs give the same bytes.
//
// Usage: node build.mjs            write dist/index.html
//        node build.mjs --check    exit 1 if dist/index.html differs from a fresh build
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const WEB = dirname(fileURLToPath(import.meta.url));
const REPO = dirname(WEB);
const OUT = join(WEB, 'dist', 'index.html');

const sha256_hex = (data) => createHash('sha256').update(data).digest('hex');
const sha256_b64 = (data) => createHash('sha256').update(data).digest('base64');

function files_under(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? files_under(join(dir, d.name)) : [join(dir, d.name)],
  );
}

// Hash of everything the bundle is made from: one "<sha256>  <path>\n" line
// per file (paths relative to the repository, sorted), then the sha256 of
// those lines. tests/web/check_bundle.cmake computes the same value.
export function source_hash() {
  const files = [
    ...files_under(join(WEB, 'src')),
    join(WEB, 'build.mjs'),
    join(WEB, 'package.json'),
    join(WEB, 'package-lock.json'),
  ].map((f) => relative(REPO, f).split('\\').join('/'));
  files.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const manifest = files.map((f) => `${sha256_hex(readFileSync(join(REPO, f)))}  ${f}\n`).join('');
  return sha256_hex(manifest);
}

async function bundle(entry) {
  const result = await esbuild.build({
    entryPoints: [join(WEB, 'src', entry)],
    bundle: true,
    minify: true,
    write: false,
    format: 'iife',
    target: ['es2020', 'chrome105', 'firefox110', 'safari16'],
    charset: 'utf8',
    legalComments: 'eof',
    logLevel: 'warning',
  });
  return result.outputFiles[0].text.trimEnd();
}

// An inline script ends at the first "</script", and after a "<!--" a
// "<script" hides the real end tag from the HTML parser. Minified code has
// these only inside string and regex literals (highlight.js's HTML grammar),
// where "\x3C" means the same "<". Re-parsing proves nothing else was touched.
async function inline_safe_js(js) {
  const out = js.replace(/<(?=\/?script|!--)/gi, '\\x3C');
  await esbuild.transform(out, { loader: 'js', logLevel: 'silent' });
  return out;
}

function inline_safe_css(css) {
  if (/<\/style/i.test(css)) throw new Error('style.css bundle contains "</style", cannot be inlined');
  return css;
}

export async function build_page() {
  const js = await inline_safe_js(await bundle('main.js'));
  const css = inline_safe_css(await bundle('style.css'));
  const csp = [
    "default-src 'none'",
    `script-src 'sha256-${sha256_b64(js)}'`,
    `style-src 'sha256-${sha256_b64(css)}'`,
    "connect-src 'self'",
    "img-src 'self' data:",
    "base-uri 'none'",
    "form-action 'none'",
  ].join('; ');
  const parts = {
    '<!--@SOURCE_HASH@-->': `<meta name="moe-web-source-hash" content="${source_hash()}">`,
    '<!--@CSP@-->': `<meta http-equiv="Content-Security-Policy" content="${csp}">`,
    '<!--@STYLE@-->': `<style>${css}</style>`,
    '<!--@SCRIPT@-->': `<script>${js}</script>`,
  };
  let html = readFileSync(join(WEB, 'src', 'index.html'), 'utf8');
  for (const [mark, value] of Object.entries(parts)) {
    if (!html.includes(mark)) throw new Error(`src/index.html lacks ${mark}`);
    html = html.replace(mark, () => value);
  }
  return html;
}

const html = await build_page();
if (process.argv.includes('--check')) {
  let old = '';
  try {
    old = readFileSync(OUT, 'utf8');
  } catch {
    // missing counts as different
  }
  if (old !== html) {
    console.error('web/dist/index.html is stale: run scripts/build_web.sh and commit the result');
    process.exit(1);
  }
  console.log('web/dist/index.html is up to date');
} else {
  mkdirSync(dirname(OUT), { recursive: true });
  writeFileSync(OUT, html);
  console.log(`wrote ${relative(REPO, OUT)} (${(Buffer.byteLength(html) / 1024).toFixed(1)} KiB)`);
}

// Markdown -> sanitised HTML for assistant replies. Raw HTML written by the
// model is shown as text (never interpreted), code blocks are highlighted with
// a core set of highlight.js languages, and the result still goes through
// DOMPurify before it reaches the DOM.
import { Marked } from 'marked';
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import css from 'highlight.js/lib/languages/css';
import diff from 'highlight.js/lib/languages/diff';
import go from 'highlight.js/lib/languages/go';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import markdown from 'highlight.js/lib/languages/markdown';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import shell from 'highlight.js/lib/languages/shell';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';

const LANGUAGES = { bash, c, cpp, css, diff, go, java, javascript, json, markdown, python, rust, shell, sql, typescript, xml, yaml };
for (const [name, def] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, def);

function escape_html(text) {
  return text.replace(/[&<>"']/g, (ch) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[ch]);
}

export function highlight_code(text, lang) {
  const name = (lang || '').trim().split(/\s+/)[0].toLowerCase();
  if (name && hljs.getLanguage(name)) {
    return { html: hljs.highlight(text, { language: name, ignoreIllegals: true }).value, name };
  }
  return { html: escape_html(text), name: '' };
}

const marked = new Marked({
  gfm: true,
  breaks: true,
  renderer: {
    // Model output is untrusted: HTML in it is displayed, not rendered.
    html({ text }) {
      return escape_html(text);
    },
    // Images would make the browser fetch arbitrary URLs; show a link instead.
    image({ href, text }) {
      return `<a href="${escape_html(href || '')}">${escape_html(text || href || 'image')}</a>`;
    },
    code({ text, lang }) {
      const { html, name } = highlight_code(text, lang);
      const cls = name ? ` class="hljs language-${name}"` : ' class="hljs"';
      return `<pre><code${cls}>${html}</code></pre>\n`;
    },
  },
});

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

const PURIFY_CONFIG = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ['style', 'img', 'form', 'button', 'textarea', 'select', 'iframe', 'video', 'audio'],
  FORBID_ATTR: ['style', 'id', 'name'],
};

// Called on every streamed update with the whole reply so far (an open ```
// fence renders as a code block until it closes). Returns safe HTML.
export function markdown_to_html(text) {
  return DOMPurify.sanitize(marked.parse(text), PURIFY_CONFIG);
}

// Markdown for agent text, which is hostile: the result is built with createElement and
// textContent only (no innerHTML or anything that parses HTML), so any HTML in the text
// stays text. Links: http:, https: and mailto: only (anything else is shown as text),
// opened in a new tab with no opener and no referrer. Images are never loaded: each is
// a link the user may click to open it in a new tab.

const SAFE_SCHEMES = new Set(["http:", "https:", "mailto:"]);
const MAX_DEPTH = 8;
const MAX_TEXT = 1024 * 1024;

export function safeUrl(raw) {
  const text = String(raw).trim();
  // a scheme is required: a relative link would point into the host's own origin
  if (!/^[a-z][a-z0-9+.-]*:/i.test(text)) return null;
  let url;
  try {
    url = new URL(text);
  } catch {
    return null;
  }
  return SAFE_SCHEMES.has(url.protocol) ? url.href : null;
}

function link(doc, href, children) {
  const a = doc.createElement("a");
  a.setAttribute("href", href);
  a.setAttribute("rel", "noopener noreferrer");
  a.setAttribute("target", "_blank");
  a.setAttribute("referrerpolicy", "no-referrer");
  for (const child of children) a.append(child);
  return a;
}

function imageLink(doc, alt, href) {
  const a = link(doc, href, []);
  a.className = "image-link";
  a.textContent = `🖼 ${alt || "image"} (not loaded: click to open ${new URL(href).host})`;
  return a;
}

// -- inline ------------------------------------------------------------------------

function findClosing(text, from, marker) {
  let i = from;
  while (i < text.length) {
    const at = text.indexOf(marker, i);
    if (at < 0) return -1;
    if (at > from) return at;
    i = at + 1;
  }
  return -1;
}

function bracketEnd(text, open) {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    const c = text[i];
    if (c === "\\") { i++; continue; }
    if (c === "[") depth++;
    else if (c === "]" && --depth === 0) return i;
  }
  return -1;
}

function inline(doc, text, depth = 0) {
  const out = [];
  let buffer = "";
  const flush = () => {
    if (buffer) out.push(doc.createTextNode(buffer));
    buffer = "";
  };
  if (depth > MAX_DEPTH) return [doc.createTextNode(text)];
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === "\\" && i + 1 < text.length && /[\\`*_{}[\]()#+\-.!<>~|]/.test(text[i + 1])) {
      buffer += text[i + 1];
      i += 2;
      continue;
    }
    if (c === "`") {
      let run = 1;
      while (text[i + run] === "`") run++;
      const fence = "`".repeat(run);
      const end = text.indexOf(fence, i + run);
      if (end > 0) {
        flush();
        const code = doc.createElement("code");
        code.textContent = text.slice(i + run, end).replace(/^ (.*) $/s, "$1");
        out.push(code);
        i = end + run;
        continue;
      }
      buffer += fence;
      i += run;
      continue;
    }
    if ((c === "*" || c === "_" || c === "~") && text[i + 1] === c) {
      const marker = c + c;
      const end = findClosing(text, i + 2, marker);
      if (end > 0) {
        flush();
        const el = doc.createElement(c === "~" ? "del" : "strong");
        el.append(...inline(doc, text.slice(i + 2, end), depth + 1));
        out.push(el);
        i = end + 2;
        continue;
      }
    }
    if ((c === "*" || c === "_") && text[i + 1] && text[i + 1] !== " " && text[i + 1] !== c) {
      const end = findClosing(text, i + 1, c);
      if (end > 0 && text[end - 1] !== " ") {
        flush();
        const em = doc.createElement("em");
        em.append(...inline(doc, text.slice(i + 1, end), depth + 1));
        out.push(em);
        i = end + 1;
        continue;
      }
    }
    const image = c === "!" && text[i + 1] === "[";
    if (c === "[" || image) {
      const open = image ? i + 1 : i;
      const close = bracketEnd(text, open);
      if (close > 0 && text[close + 1] === "(") {
        const end = text.indexOf(")", close + 2);
        if (end > 0) {
          const label = text.slice(open + 1, close);
          const target = text.slice(close + 2, end).trim().split(/\s+/)[0] || "";
          const href = safeUrl(target);
          flush();
          if (image) {
            if (href && !href.startsWith("mailto:")) out.push(imageLink(doc, label, href));
            else out.push(doc.createTextNode(text.slice(i, end + 1)));
          } else if (href) {
            out.push(link(doc, href, inline(doc, label, depth + 1)));
          } else {
            // an unsafe target: the label and the target, as text
            out.push(...inline(doc, label, depth + 1), doc.createTextNode(` (${target})`));
          }
          i = end + 1;
          continue;
        }
      }
    }
    if (c === "<") {
      const end = text.indexOf(">", i + 1);
      if (end > 0) {
        const inside = text.slice(i + 1, end);
        const href = /^[a-z][a-z0-9+.-]*:\S+$/i.test(inside) ? safeUrl(inside) : null;
        if (href) {
          flush();
          out.push(link(doc, href, [doc.createTextNode(inside)]));
          i = end + 1;
          continue;
        }
      }
    }
    if ((c === "h" || c === "H") && /^https?:\/\//i.test(text.slice(i, i + 8))) {
      const match = /^https?:\/\/[^\s<>"]+[^\s<>".,;:!?)\]'}]/i.exec(text.slice(i));
      const href = match && safeUrl(match[0]);
      if (href) {
        flush();
        out.push(link(doc, href, [doc.createTextNode(match[0])]));
        i += match[0].length;
        continue;
      }
    }
    buffer += c;
    i++;
  }
  flush();
  return out;
}

// -- blocks ------------------------------------------------------------------------

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const BULLET = /^(\s*)([-*+])\s+(.*)$/;
const ORDERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

function cells(line) {
  return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
}

function blocks(doc, lines, depth) {
  const frag = doc.createDocumentFragment();
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) { i++; continue; }
    const fence = FENCE.exec(line);
    if (fence) {
      const marker = fence[1];
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trimStart().startsWith(marker)) body.push(lines[i++]);
      i++;
      const pre = doc.createElement("pre");
      const code = doc.createElement("code");
      if (fence[2]) code.dataset.language = fence[2].slice(0, 40);
      code.textContent = body.join("\n");
      pre.append(code);
      frag.append(pre);
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      const h = doc.createElement(`h${Math.min(6, heading[1].length + 2)}`);
      h.append(...inline(doc, heading[2], depth));
      frag.append(h);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      frag.append(doc.createElement("hr"));
      i++;
      continue;
    }
    if (QUOTE.test(line) && depth < MAX_DEPTH) {
      const inner = [];
      while (i < lines.length && QUOTE.test(lines[i])) inner.push(QUOTE.exec(lines[i++])[1]);
      const quote = doc.createElement("blockquote");
      quote.append(blocks(doc, inner, depth + 1));
      frag.append(quote);
      continue;
    }
    const bullet = BULLET.exec(line), ordered = ORDERED.exec(line);
    if ((bullet || ordered) && depth < MAX_DEPTH) {
      const pattern = bullet ? BULLET : ORDERED;
      const list = doc.createElement(bullet ? "ul" : "ol");
      if (ordered && ordered[2] !== "1") list.setAttribute("start", String(parseInt(ordered[2], 10)));
      const indent = (bullet || ordered)[1].length;
      while (i < lines.length) {
        const m = pattern.exec(lines[i]);
        if (!m || m[1].length !== indent) break;
        const item = [m[3]];
        i++;
        while (i < lines.length && lines[i].trim() && /^\s/.test(lines[i])) {
          const next = pattern.exec(lines[i]);
          if (next && next[1].length === indent) break;
          item.push(lines[i++].replace(/^\s{1,4}/, ""));
        }
        const li = doc.createElement("li");
        li.append(blocks(doc, item, depth + 1));
        list.append(li);
        while (i < lines.length && !lines[i].trim() && i + 1 < lines.length && pattern.exec(lines[i + 1])) i++;
      }
      frag.append(list);
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])) {
      const table = doc.createElement("table");
      const head = doc.createElement("tr");
      for (const cell of cells(line)) {
        const th = doc.createElement("th");
        th.append(...inline(doc, cell, depth));
        head.append(th);
      }
      const thead = doc.createElement("thead");
      thead.append(head);
      table.append(thead);
      const tbody = doc.createElement("tbody");
      i += 2;
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
        const tr = doc.createElement("tr");
        for (const cell of cells(lines[i++])) {
          const td = doc.createElement("td");
          td.append(...inline(doc, cell, depth));
          tr.append(td);
        }
        tbody.append(tr);
      }
      table.append(tbody);
      frag.append(table);
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !HEADING.test(lines[i])
           && !QUOTE.test(lines[i]) && !(para.length && (BULLET.test(lines[i]) || ORDERED.test(lines[i])))) {
      para.push(lines[i++]);
    }
    if (!para.length) para.push(lines[i++]);
    const p = doc.createElement("p");
    para.forEach((text, n) => {
      if (n) p.append(doc.createElement("br"));
      p.append(...inline(doc, text.trim(), depth));
    });
    frag.append(p);
  }
  return frag;
}

export function renderMarkdown(text, doc = document) {
  const source = String(text ?? "").slice(0, MAX_TEXT).replace(/\r\n?/g, "\n");
  return blocks(doc, source.split("\n"), 0);
}

// The one way the page's modules make elements: attributes and text only, so nothing an
// agent or another client sent can become markup.

// `el("button", {className: "x", text: "Send", onclick: f}, child...)`: a `text` prop is
// set as textContent, `on...` props as listeners, others as attributes (true: present).
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "className") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

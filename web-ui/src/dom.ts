// Small DOM helpers: elements are built with text nodes only, so names and
// console text coming from the manager can never be interpreted as markup.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      el.className = String(value);
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el: Element, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

/** Replace an element's children. */
export function fill(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

/** Set text only when it changed, so polling does not disturb selection or focus. */
export function setText(el: Element, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

let toastHost: HTMLElement | null = null;

/** A short message in the corner; errors stay longer than confirmations. */
export function toast(message: string, kind: 'ok' | 'error' = 'ok'): void {
  if (toastHost === null) {
    toastHost = h('div', { class: 'toasts', role: 'status', 'aria-live': 'polite' });
    document.body.append(toastHost);
  }
  const t = h('div', { class: `toast toast-${kind}` }, message);
  toastHost.append(t);
  window.setTimeout(() => t.remove(), kind === 'error' ? 8000 : 4000);
}

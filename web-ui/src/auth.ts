// The operator's bearer token: asked once, kept in sessionStorage for the tab's life.
// One dialog at a time: every request that meets a 401 while it is open waits
// for it (api.ts), so a refused token is asked for once, not once per request.

import { h } from './dom';

const KEY = 'pinfold.token';
const listeners = new Set<() => void>();
/** The token last typed into the dialog in this page's life (tells a fresh token from one kept earlier). */
let entered: string | null = null;

export function lastEnteredToken(): string | null {
  return entered;
}

export function getToken(): string | null {
  const t = sessionStorage.getItem(KEY);
  return t === null || t === '' ? null : t;
}

export function setToken(token: string): void {
  sessionStorage.setItem(KEY, token);
  listeners.forEach((l) => l());
}

export function clearToken(): void {
  sessionStorage.removeItem(KEY);
  listeners.forEach((l) => l());
}

/** Call `fn` whenever the token is set or forgotten (the header shows its state). */
export function onTokenChange(fn: () => void): void {
  listeners.add(fn);
}

let pending: Promise<string | null> | null = null;

/**
 * Show the token dialog and resolve with the entered token (also stored), or
 * null when the operator cancels. Concurrent callers share one dialog.
 */
export function askToken(reason?: string, isError = reason !== undefined): Promise<string | null> {
  if (pending !== null) return pending;
  pending = new Promise<string | null>((resolve) => {
    const input = h('input', {
      id: 'token-input',
      type: 'password',
      autocomplete: 'off',
      spellcheck: 'false',
      placeholder: 'Bearer token',
      required: true,
    });
    const form = h(
      'form',
      { method: 'dialog', class: 'dialog-body' },
      h('h2', {}, 'Manager token'),
      h(
        'p',
        { class: isError ? 'dialog-error' : 'muted', 'data-testid': 'token-reason' },
        reason ?? 'Changing anything (starting, stopping, creating or deleting partitions, uploading images, importing a configuration, typing into a console) needs the manager token. It is kept for this browser tab only.',
      ),
      h('label', { for: 'token-input' }, 'Token'),
      input,
      h(
        'div',
        { class: 'dialog-actions' },
        h('button', { type: 'button', class: 'btn', value: 'cancel', 'data-testid': 'token-cancel' }, 'Cancel'),
        h('button', { type: 'submit', class: 'btn btn-primary', value: 'ok', 'data-testid': 'token-save' }, 'Use token'),
      ),
    );
    const dialog = h('dialog', { class: 'dialog', 'data-testid': 'token-dialog' }, form);
    let result: string | null = null;
    form.addEventListener('submit', () => {
      const v = input.value.trim();
      if (v !== '') {
        result = v;
        entered = v;
        setToken(v);
      }
    });
    form.querySelector('[value="cancel"]')?.addEventListener('click', () => dialog.close());
    dialog.addEventListener('close', () => {
      dialog.remove();
      pending = null;
      resolve(result);
    });
    document.body.append(dialog);
    dialog.showModal();
    input.focus();
  });
  return pending;
}

/** Ask the operator to confirm a disruptive action; resolves true on confirm. */
export function confirmAction(title: string, text: string, verb: string, danger = false): Promise<boolean> {
  return new Promise((resolve) => {
    let ok = false;
    const confirmBtn = h(
      'button',
      { type: 'submit', class: danger ? 'btn btn-danger' : 'btn btn-primary', 'data-testid': 'confirm-ok' },
      verb,
    );
    const form = h(
      'form',
      { method: 'dialog', class: 'dialog-body' },
      h('h2', {}, title),
      h('p', { class: 'muted' }, text),
      h(
        'div',
        { class: 'dialog-actions' },
        h('button', { type: 'button', class: 'btn', 'data-testid': 'confirm-cancel' }, 'Cancel'),
        confirmBtn,
      ),
    );
    const dialog = h('dialog', { class: 'dialog', 'data-testid': 'confirm-dialog' }, form);
    form.addEventListener('submit', () => {
      ok = true;
    });
    form.querySelector('[data-testid="confirm-cancel"]')?.addEventListener('click', () => dialog.close());
    dialog.addEventListener('close', () => {
      dialog.remove();
      resolve(ok);
    });
    document.body.append(dialog);
    dialog.showModal();
    confirmBtn.focus();
  });
}

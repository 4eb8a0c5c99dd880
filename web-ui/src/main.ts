// Entry point: the header (link status, token), and a hash router that mounts
// the overview or a partition page.

import './style.css';
import { askToken, clearToken, getToken, onTokenChange } from './auth';
import { h, setText } from './dom';
import { onLinkChange } from './poll';
import { overviewView } from './views/overview';
import { partitionView } from './views/partition';
import type { View } from './views/view';

const link = h('span', { class: 'link link-wait', 'data-testid': 'link' }, 'Connecting…');
const tokenBtn = h('button', { type: 'button', class: 'btn btn-ghost', 'data-testid': 'token-button' });

function renderToken(): void {
  const have = getToken() !== null;
  setText(tokenBtn, have ? 'Forget token' : 'Enter token');
  tokenBtn.title = have
    ? 'A manager token is kept for this tab; click to forget it'
    : 'Actions and console input need the manager token';
}
tokenBtn.addEventListener('click', () => {
  if (getToken() !== null) clearToken();
  else void askToken();
});
onTokenChange(renderToken);
renderToken();

onLinkChange((ok, message) => {
  link.className = ok ? 'link link-ok' : 'link link-bad';
  setText(link, ok ? `${message} · ${new Date().toLocaleTimeString()}` : message);
});

const main = h('main', { class: 'main' });
const header = h(
  'header',
  { class: 'topbar' },
  h(
    'a',
    { class: 'brand', href: '#/' },
    h('span', { class: 'brand-mark', 'aria-hidden': 'true' }),
    h('span', { class: 'brand-name' }, 'Pinfold'),
    h('span', { class: 'brand-sub' }, 'partitioning hypervisor'),
  ),
  h('div', { class: 'spacer' }),
  link,
  tokenBtn,
);
document.getElementById('app')?.append(header, main);

let current: View | null = null;

function route(): void {
  current?.dispose();
  const m = /^#\/partitions\/([^/]+)$/.exec(window.location.hash);
  current = m ? partitionView(decodeURIComponent(m[1])) : overviewView();
  main.replaceChildren(current.el);
  document.title = m ? `${decodeURIComponent(m[1])} · Pinfold` : 'Pinfold';
  window.scrollTo(0, 0);
}

window.addEventListener('hashchange', route);
route();

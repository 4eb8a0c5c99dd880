// Entry point: the header (navigation, link status, token), sign-in (the
// token dialog once, before any view reads, when the manager asks for one),
// and a hash router that mounts a view. Views whose routes this manager does not serve (an older
// manager answers 404) are left out of the navigation (src/caps.ts).

import './style.css';
import { enterToken, forgetToken, signIn } from './api';
import { getToken, onTokenChange } from './auth';
import { caps } from './caps';
import { h, setText } from './dom';
import { onLinkChange } from './poll';
import { configView } from './views/config';
import { eventsView } from './views/events';
import { partitionForm } from './views/form';
import { imagesView } from './views/images';
import { overviewView } from './views/overview';
import { partitionView } from './views/partition';
import { resourcesView } from './views/resources';
import type { View } from './views/view';

const link = h('span', { class: 'link link-wait', 'data-testid': 'link' }, 'Connecting…');
const tokenBtn = h('button', { type: 'button', class: 'btn btn-ghost', 'data-testid': 'token-button' });

function renderToken(): void {
  const have = getToken() !== null;
  setText(tokenBtn, have ? 'Forget token' : 'Enter token');
  tokenBtn.title = have ? 'A manager token is kept for this tab; click to forget it' : 'This manager asks for a token to show or change anything';
}
tokenBtn.addEventListener('click', () => {
  if (getToken() !== null) forgetToken();
  else
    void enterToken().then((ok) => {
      // Signed out until now: the view's reads were not sent.
      if (ok) {
        probeRoutes();
        route();
      }
    });
});
onTokenChange(renderToken);
renderToken();

onLinkChange((ok, message) => {
  link.className = ok ? 'link link-ok' : 'link link-bad';
  setText(link, ok ? `${message} · ${new Date().toLocaleTimeString()}` : message);
});

const NAV: [string, string, keyof Awaited<ReturnType<typeof caps>> | null][] = [
  ['#/', 'Overview', null],
  ['#/resources', 'Resources', 'resources'],
  ['#/images', 'Images', 'images'],
  ['#/events', 'Events', 'events'],
  ['#/config', 'Config', 'config'],
];
const navLinks = NAV.map(([href, label, cap]) => h('a', { href, 'data-nav': label.toLowerCase(), hidden: cap !== null }, label));

/** Show the views this manager serves (probed once, with the token: not while signed out). */
function probeRoutes(): void {
  void caps().then((c) => NAV.forEach(([, , cap], i) => (navLinks[i].hidden = cap !== null && !c[cap])));
}

const main = h('main', { class: 'main' });
const header = h(
  'header',
  { class: 'topbar' },
  h('a', { class: 'brand', href: '#/' }, h('span', { class: 'brand-mark', 'aria-hidden': 'true' }), h('span', { class: 'brand-name' }, 'Pinfold'), h('span', { class: 'brand-sub' }, 'partitioning hypervisor')),
  h('nav', { class: 'nav', 'aria-label': 'Views' }, ...navLinks),
  h('div', { class: 'spacer' }),
  link,
  tokenBtn,
);
document.getElementById('app')?.append(header, main);

let current: View | null = null;

function mount(hash: string): [View, string] {
  let m: RegExpExecArray | null;
  if ((m = /^#\/partitions\/([^/]+)\/edit$/.exec(hash))) {
    const name = decodeURIComponent(m[1]);
    return [partitionForm(name), `Edit ${name}`];
  }
  if ((m = /^#\/partitions\/([^/]+)$/.exec(hash))) {
    const name = decodeURIComponent(m[1]);
    return [partitionView(name), name];
  }
  switch (hash) {
    case '#/new':
      return [partitionForm(null), 'New partition'];
    case '#/resources':
      return [resourcesView(), 'Resources'];
    case '#/images':
      return [imagesView(), 'Images'];
    case '#/events':
      return [eventsView(), 'Events'];
    case '#/config':
      return [configView(), 'Configuration'];
    default:
      return [overviewView(), ''];
  }
}

function route(): void {
  current?.dispose();
  const hash = window.location.hash || '#/';
  const [view, title] = mount(hash);
  current = view;
  main.replaceChildren(view.el);
  document.title = title ? `${title} · Pinfold` : 'Pinfold';
  for (const a of navLinks) a.classList.toggle('active', a.getAttribute('href') === hash);
  window.scrollTo(0, 0);
}

// Sign in first (one token dialog when the manager's reads need a token and
// none is kept, or the kept one is refused), then probe the routes and mount.
void signIn().then((signedIn) => {
  if (signedIn) probeRoutes();
  window.addEventListener('hashchange', route);
  route();
});

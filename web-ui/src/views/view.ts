// What the router mounts: a root element and a way to stop its timers and loops.

export interface View {
  el: HTMLElement;
  dispose(): void;
}

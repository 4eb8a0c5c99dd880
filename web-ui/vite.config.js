// Vite build for the Pinfold web UI. The manager embeds dist/ in its unikernel
// image, so the output is kept small: no source maps, one JS and one CSS file.
import { defineConfig } from 'vite';

export default defineConfig({
  // Relative asset URLs so the bundle works wherever the manager mounts it.
  base: './',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    sourcemap: false,
    target: 'es2022',
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 600,
  },
  server: {
    // `npm run mock` listens on 8080; the dev server forwards the API to it.
    proxy: {
      '/api': 'http://127.0.0.1:8080',
      '/metrics': 'http://127.0.0.1:8080',
    },
  },
});

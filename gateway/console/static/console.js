// The console's only script: every few seconds it reads the page again and puts the fresh
// copy of each part marked data-live in place, so an operator watches statuses change
// without reloading (and without losing their place). With JavaScript off the page's
// Refresh link does the same by hand.
"use strict";
(function () {
  const every = 2000;
  async function refresh() {
    try {
      const answer = await fetch(location.href, {
        headers: {"X-Console-Refresh": "1"},
        credentials: "same-origin",
        cache: "no-store",
        redirect: "error",
      });
      if (!answer.ok) {
        return;
      }
      const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
      for (const part of document.querySelectorAll("[data-live]")) {
        const replacement = fresh.getElementById(part.id);
        if (replacement !== null) {
          part.replaceWith(document.adoptNode(replacement));
        }
      }
    } catch (error) {
      // Signed out, or the gateway is away: the page stays as it was, and says so.
      document.body.classList.add("stale");
    } finally {
      setTimeout(refresh, every);
    }
  }
  setTimeout(refresh, every);
})();

// The view's one script: served from this origin (the page's policy runs
// nothing inline). It keeps the pages that say so up to date: a page
// whose <main> carries data-live has the JSON at that path polled every
// two seconds, and its rollout's state, waves and steps changed in place.
// Every value is set as text or as an attribute, never as markup.
"use strict";

(function () {
  const main = document.querySelector("main[data-live]");
  if (!main) {
    return;
  }
  const path = main.getAttribute("data-live");
  const every = 2000;

  function setText(el, text) {
    if (el && el.textContent !== text) {
      el.textContent = text;
    }
  }

  function setStep(el, step) {
    // The step is the rollout's word; as a class it is one of a few.
    el.className = el.className.replace(/\bstep-[a-z]+\b/g, "").trim() + " step-" + step.replace(/[^a-z]/g, "");
  }

  function update(v) {
    const r = v.rollout;
    const state = document.getElementById("rollout-state");
    if (state) {
      setText(state, r.state);
      state.className = "rollout-state state-" + String(r.state).replace(/[^a-z]/g, "");
    }
    setText(document.getElementById("rollout-reason"), r.reason || "");
    setText(document.getElementById("rollout-summary"), v.summary);
    const since = document.getElementById("since-halt");
    if (since) {
      since.replaceChildren(...(v.since_halt || []).map(function (line) {
        const li = document.createElement("li");
        li.textContent = line;
        return li;
      }));
    }
    for (const w of v.waves || []) {
      const wave = document.querySelector('div.wave[data-wave="' + Number(w.n) + '"]');
      if (!wave) {
        // A wave this page was not drawn with: draw it afresh.
        location.reload();
        return;
      }
      setText(wave.querySelector(".wave-summary"), w.summary);
      for (const seg of w.progress.segments) {
        const rect = wave.querySelector('svg.progress rect[data-step="' + CSS.escape(seg.step) + '"]');
        if (rect) {
          rect.setAttribute("x", String(Number(seg.x)));
          rect.setAttribute("width", String(Number(seg.w)));
          setText(rect.querySelector("title"), seg.n + " " + seg.step);
        }
      }
      for (const n of w.nodes || []) {
        const li = wave.querySelector('li.step[data-node="' + CSS.escape(n.node) + '"]');
        if (!li) {
          continue;
        }
        li.setAttribute("data-step", n.step);
        const st = li.querySelector(".step-state");
        if (st) {
          setText(st, n.step);
          setStep(st, n.step);
        }
        setText(li.querySelector(".step-reason"), n.reason || "");
      }
    }
    main.setAttribute("data-updated", new Date().toISOString());
  }

  async function poll() {
    try {
      const resp = await fetch(path, { credentials: "same-origin", headers: { "Accept": "application/json" }, cache: "no-store" });
      if (resp.ok) {
        update(await resp.json());
      } else if (resp.status === 401) {
        // The token expired: the login page says so.
        location.reload();
        return;
      }
    } catch (e) {
      // The control plane is away a moment: try again on the next beat,
      // quietly (a console error would be noise, not news).
    }
    setTimeout(poll, every);
  }
  setTimeout(poll, every);
})();

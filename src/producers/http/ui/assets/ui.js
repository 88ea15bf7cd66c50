/* global document, fetch, location, clearTimeout, setTimeout, setInterval, EventSource, window */
// The orq session view's only script: keeps the page current and runs the actions. The server
// renders every page; this swaps the content in place when the session's event stream (or, on
// the list, a timer) says something may have changed. No framework, nothing from a CDN.
(() => {
  'use strict';
  const main = document.getElementById('live');
  const live = document.body.dataset.live;
  const POLL_MS = 3000;
  const DEBOUNCE_MS = 150;
  let timer;
  let busy = false;
  let again = false;

  // A person choosing a filter or typing a note keeps what they did across a refresh.
  function keepInput(swap) {
    const note = document.getElementById('resume-note');
    const text = note ? note.value : '';
    const focused = document.activeElement && document.activeElement.id;
    swap();
    const after = document.getElementById('resume-note');
    if (after) after.value = text;
    if (focused) document.getElementById(focused)?.focus();
  }

  async function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      const response = await fetch(location.href, { headers: { 'x-orq-fragment': '1' } });
      if (response.ok) {
        const text = await response.text();
        keepInput(() => {
          main.innerHTML = text;
        });
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
      }
    } catch {
      // The server is away for a moment: the next event or tick tries again.
    } finally {
      busy = false;
      if (again) {
        again = false;
        schedule();
      }
    }
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, DEBOUNCE_MS);
  }

  if (live === 'poll') {
    setInterval(() => {
      const active = document.activeElement;
      if (!(active && main.contains(active) && active.matches('select'))) void refresh();
    }, POLL_MS);
  } else if (live) {
    const source = new EventSource(live);
    source.onmessage = schedule;
    // The stream starts after the last entry the page shows: what comes is news. At its end
    // the session is finished and every entry has come, so there is nothing to wait for.
    source.addEventListener('end', () => source.close());
  }

  main.addEventListener('click', async (event) => {
    const button = event.target.closest('button[data-action]');
    if (!button) return;
    if (!window.confirm(button.dataset.confirm)) return;
    const body = JSON.parse(button.dataset.body || '{}');
    if (button.dataset.note) {
      const note = document.querySelector(button.dataset.note).value.trim();
      if (note) body[button.dataset.field || 'note'] = note;
    }
    const status = main.querySelector('.action-status');
    if (button.dataset.plan) {
      try {
        body.plan = JSON.parse(document.querySelector(button.dataset.plan).value);
      } catch (error) {
        status.textContent = `The edited plan is not JSON: ${error.message}`;
        status.dataset.outcome = 'refused';
        return;
      }
      if (document.querySelector(button.dataset.flag)?.checked) body.allowTermLoss = true;
    }
    button.disabled = true;
    try {
      const response = await fetch(button.dataset.action, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const answer = await response.json().catch(() => ({}));
      status.textContent = response.ok
        ? 'Accepted: the coordinator applies it in a moment.'
        : `Refused (${response.status}): ${answer.message || ''} ${answer.hint || ''}`;
      status.dataset.outcome = response.ok ? 'accepted' : 'refused';
    } finally {
      button.disabled = false;
      schedule();
    }
  });
})();

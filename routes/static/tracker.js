/*! eventq tracker: records page views and custom events, sends them to POST /api/track.
 *
 * <script src="https://EVENTQ_HOST/tracker.js" data-site-key="site_…"
 *         data-member-id="optional" data-endpoint="optional" defer></script>
 *
 * window.eventq.track(type, {url?})  queue a custom event (type: 1–64 of [a-z0-9_.:-])
 * window.eventq.setMember(id|null)   attribute later events to a member (or to nobody)
 *
 * Page views are recorded on load and on history navigation (pushState, replaceState,
 * popstate); a change of the #fragment alone is not a page view. Events queued in the same
 * tick go out as one request, by navigator.sendBeacon or else fetch with keepalive.
 */
(function () {
  'use strict';

  if (window.eventq && window.eventq.loaded) return; // the tag was included twice

  var TYPE_RE = /^[a-z0-9_.:-]{1,64}$/;
  var MAX_EVENTS = 100; // per request (CONTRACT.md)
  var MAX_BYTES = 60000; // per request; the server takes 64 KiB, beacons share a 64 KiB quota
  var MAX_URL = 2048;
  var MAX_MEMBER = 255;

  var script = document.currentScript || document.querySelector('script[data-site-key]');
  var attr = function (name) {
    return script ? script.getAttribute(name) : null;
  };
  var siteKey = attr('data-site-key');
  var endpoint = attr('data-endpoint');
  if (!endpoint && script && script.src) {
    try {
      endpoint = new URL(script.src, location.href).origin + '/api/track';
    } catch (e) { /* reported below */ }
  }
  var member = null;

  if (!siteKey || !endpoint) {
    console.warn('eventq: data-site-key or the endpoint is missing; nothing will be tracked');
    window.eventq = { loaded: true, track: function () {}, setMember: function () {} };
    return;
  }

  // Session state lives in sessionStorage (one session per tab), or in memory when storage is
  // unavailable (blocked cookies, sandboxed iframes, quota).
  var memory = {};
  var store = {
    get: function (k) {
      try {
        var v = window.sessionStorage.getItem(k);
        if (v !== null) return v;
      } catch (e) { /* fall through to memory */ }
      return Object.prototype.hasOwnProperty.call(memory, k) ? memory[k] : null;
    },
    set: function (k, v) {
      memory[k] = v;
      try {
        window.sessionStorage.setItem(k, v);
      } catch (e) { /* memory keeps it */ }
    },
  };
  var prefix = 'eventq:' + siteKey + ':';

  function uuid() {
    var c = window.crypto;
    if (c && typeof c.randomUUID === 'function') return c.randomUUID(); // secure contexts only
    var b = new Uint8Array(16);
    if (c && typeof c.getRandomValues === 'function') {
      c.getRandomValues(b);
    } else {
      for (var i = 0; i < 16; i++) b[i] = Math.floor(Math.random() * 256);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    var h = Array.prototype.map.call(b, function (x) { return (x + 0x100).toString(16).slice(1); }).join('');
    return h.slice(0, 8) + '-' + h.slice(8, 12) + '-' + h.slice(12, 16) + '-' + h.slice(16, 20) + '-' + h.slice(20);
  }

  function sessionID() {
    var id = store.get(prefix + 'sid');
    if (!id) {
      id = uuid();
      store.set(prefix + 'sid', id);
    }
    return id;
  }

  function nextSequence() {
    var n = (parseInt(store.get(prefix + 'seq'), 10) || 0) + 1;
    store.set(prefix + 'seq', String(n));
    return n;
  }

  // clampURL keeps an absolute URL within the server's limit: without fragment, then without
  // query, then cut (never inside a %XX escape).
  function clampURL(u) {
    if (u.length <= MAX_URL) return u;
    u = u.split('#')[0];
    if (u.length <= MAX_URL) return u;
    u = u.split('?')[0];
    if (u.length <= MAX_URL) return u;
    return u.slice(0, MAX_URL).replace(/%[0-9a-fA-F]?$/, '');
  }

  function pageURL(u) {
    try {
      var abs = new URL(u || location.href, location.href);
      if (abs.protocol !== 'http:' && abs.protocol !== 'https:') return null;
      return clampURL(abs.href);
    } catch (e) {
      return null;
    }
  }

  var queue = [];
  var scheduled = false;

  function byteLength(s) {
    return typeof TextEncoder === 'function' ? new TextEncoder().encode(s).length : s.length * 3;
  }

  function send(events) {
    var body = JSON.stringify({ site_key: siteKey, events: events });
    var sent = false;
    if (navigator.sendBeacon) {
      try {
        // text/plain is CORS-safelisted, so neither path needs a preflight.
        sent = navigator.sendBeacon(endpoint, new Blob([body], { type: 'text/plain' }));
      } catch (e) { /* fall back to fetch */ }
    }
    if (!sent && typeof fetch === 'function') {
      post(body, true).catch(function () {
        // Browsers cap the bytes of all keepalive requests in flight (64 KiB in Chrome), so a
        // burst can be refused outright; while the page lives, a plain request still works.
        // (A network failure is retried too; consumers can dedupe on session and sequence.)
        if (document.visibilityState !== 'hidden') post(body, false).catch(function () {});
      });
    }
  }

  function post(body, keepalive) {
    return fetch(endpoint, {
      method: 'POST',
      body: body,
      keepalive: keepalive,
      mode: 'cors',
      headers: { 'Content-Type': 'text/plain' },
    });
  }

  // flush sends everything queued, in requests of at most MAX_EVENTS events and MAX_BYTES.
  function flush() {
    scheduled = false;
    while (queue.length) {
      var batch = [];
      var size = 64; // the envelope
      while (queue.length && batch.length < MAX_EVENTS) {
        var n = byteLength(JSON.stringify(queue[0])) + 1;
        if (batch.length && size + n > MAX_BYTES) break;
        size += n;
        batch.push(queue.shift());
      }
      send(batch);
    }
  }

  function record(type, url) {
    var u = pageURL(url);
    if (!u) return; // file:, about:, data: pages have no host to attribute the event to
    queue.push({
      type: type,
      session_id: sessionID(),
      url: u,
      event_sequence: nextSequence(),
      audience_member_id: member,
    });
    if (!scheduled) {
      scheduled = true;
      setTimeout(flush, 0);
    }
  }

  function setMember(id) {
    if (id === null || id === undefined || id === '') {
      member = null;
      return;
    }
    id = String(id);
    if (id.length > MAX_MEMBER) {
      console.warn('eventq: ignored member id longer than ' + MAX_MEMBER + ' characters');
      return;
    }
    member = id;
  }

  // Page views: once now, then whenever the URL (fragment aside) changes.
  var withoutHash = function (u) { return u.split('#')[0]; };
  var lastPage = null;
  function pageView() {
    var here = withoutHash(location.href);
    if (here === lastPage) return;
    lastPage = here;
    record('page_view');
  }

  ['pushState', 'replaceState'].forEach(function (name) {
    var original = history[name];
    if (typeof original !== 'function') return;
    history[name] = function () {
      var result = original.apply(this, arguments);
      pageView();
      return result;
    };
  });
  window.addEventListener('popstate', pageView);
  window.addEventListener('pagehide', flush);
  document.addEventListener('visibilitychange', function () {
    if (document.visibilityState === 'hidden') flush();
  });

  window.eventq = {
    loaded: true,
    track: function (type, opts) {
      if (typeof type !== 'string' || !TYPE_RE.test(type)) {
        console.warn('eventq: ignored event type ' + JSON.stringify(type) + ', want 1-64 of [a-z0-9_.:-]');
        return;
      }
      record(type, opts && opts.url);
    },
    setMember: setMember,
  };

  setMember(attr('data-member-id'));
  pageView();
})();

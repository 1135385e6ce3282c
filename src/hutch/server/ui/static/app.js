// hutch dashboard: live updates for server-rendered pages. No framework, nothing from elsewhere.
// Text from the server is put in the page with textContent only; HTML fragments come escaped
// from the server (src/hutch/server/ui/html.py).
"use strict";

(function () {
  var REFRESH_MS = 2000;
  var MAX_LOG_CHARS = 1 << 20;
  var MAX_ROWS = 2000;

  function byId(id) { return document.getElementById(id); }

  // A login link's form sends its one-time token at once.
  document.querySelectorAll("form[data-autosubmit]").forEach(function (form) { form.submit(); });

  // Fragments: a table body replaced by the server's rows every REFRESH_MS.
  document.querySelectorAll("[data-fragment]").forEach(function (el) {
    var target = byId(el.dataset.target);
    var count = el.dataset.count ? byId(el.dataset.count) : null;
    var busy = false;
    function refresh() {
      if (busy || document.hidden) { return; }
      busy = true;
      fetch(el.dataset.fragment, { credentials: "same-origin", redirect: "follow", cache: "no-store" })
        .then(function (resp) {
          if (resp.redirected || resp.status === 401) { window.location.reload(); return null; }
          if (!resp.ok) { el.textContent = "refresh failed: HTTP " + resp.status; return null; }
          if (count && resp.headers.get("x-hutch-count") !== null) { count.textContent = resp.headers.get("x-hutch-count"); }
          return resp.text();
        })
        .then(function (html) {
          if (html === null || html === undefined) { return; }
          var head = target.closest("table").querySelectorAll("th").length;
          target.innerHTML = html || '<tr class="empty"><td colspan="' + head + '">none</td></tr>';
          el.textContent = "updated " + new Date().toLocaleTimeString();
        })
        .catch(function (err) { el.textContent = "refresh failed: " + err; })
        .finally(function () { busy = false; });
    }
    window.setInterval(refresh, REFRESH_MS);
  });

  function setState(el, text) { if (el) { el.textContent = text; } }

  function addRow(tbody, cells, cls) {
    var empty = tbody.querySelector("tr.empty");
    if (empty) { empty.remove(); }
    var tr = document.createElement("tr");
    if (cls) { tr.className = cls; }
    cells.forEach(function (value) {
      var td = document.createElement("td");
      td.textContent = value === null || value === undefined ? "" : String(value);
      tr.appendChild(td);
    });
    tbody.appendChild(tr);
    while (tbody.rows.length > MAX_ROWS) { tbody.deleteRow(0); }
  }

  function decode(item) {
    if (!item.base64) { return item.data; }
    try {
      var bytes = Uint8Array.from(atob(item.data), function (c) { return c.charCodeAt(0); });
      return new TextDecoder("utf-8", { fatal: false }).decode(bytes);
    } catch (e) { return "[" + item.data.length + " bytes of binary output]"; }
  }

  function follow(url, state, handlers) {
    var source = new EventSource(url);
    source.onopen = function () { setState(state, "live"); };
    source.onerror = function () { setState(state, source.readyState === 2 ? "closed" : "reconnecting"); };
    Object.keys(handlers).forEach(function (name) {
      source.addEventListener(name, function (ev) { handlers[name](JSON.parse(ev.data)); });
    });
    source.addEventListener("gone", function (ev) {
      var info = JSON.parse(ev.data);
      setState(state, "ended: " + (info.message || ""));
      source.close();
    });
    return source;
  }

  // A sandbox's logs: every line as it arrives, stderr marked.
  var logs = byId("logs");
  if (logs && logs.dataset.stream) {
    follow(logs.dataset.stream, byId(logs.dataset.state), {
      log: function (item) {
        var atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
        var span = document.createElement("span");
        span.className = item.stream;
        span.textContent = decode(item);
        logs.appendChild(span);
        while (logs.textContent.length > MAX_LOG_CHARS && logs.firstChild) { logs.removeChild(logs.firstChild); }
        if (atEnd) { logs.scrollTop = logs.scrollHeight; }
      }
    });
  }

  // A sandbox's events, and its egress decisions among them.
  document.querySelectorAll("[data-events]").forEach(function (el) {
    var events = byId("events");
    var egress = byId("egress");
    follow(el.dataset.events, byId(el.dataset.state), {
      hutch: function (ev) {
        var when = new Date(ev.time * 1000).toLocaleString();
        var data = JSON.stringify(ev.data);
        addRow(events, [ev.seq, when, ev.type, ev.run_id, ev.actor, data.length > 400 ? data.slice(0, 400) + "…" : data],
               "event-" + ev.type);
        if (egress && ev.type.indexOf("egress_") === 0) {
          var d = ev.data || {};
          addRow(egress, [when, ev.type === "egress_allowed" ? "allowed" : "denied", d.host, d.port, d.reason || ""],
                 ev.type === "egress_allowed" ? "allowed" : "denied");
        }
      }
    });
  });
})();

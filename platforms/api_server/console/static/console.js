// hermes console: the Live page refreshes itself from /console/live.json every two seconds.
// Only textContent is ever set: nothing the server sends is parsed as HTML.
"use strict";

(function () {
  var status = document.getElementById("live-status");
  if (!status) {
    return;
  }
  var url = status.getAttribute("data-poll");

  function text(value) {
    return value === null || value === undefined ? "\u2013" : String(value);
  }

  function cell(row, label, value, numeric) {
    var td = document.createElement("td");
    td.setAttribute("data-label", label);
    if (numeric) {
      td.className = "num";
    }
    td.textContent = text(value);
    row.appendChild(td);
  }

  function rows(id, items, fill) {
    var body = document.querySelector("#" + id + " tbody");
    if (!body) {
      return;
    }
    while (body.firstChild) {
      body.removeChild(body.firstChild);
    }
    items.forEach(function (item) {
      var row = document.createElement("tr");
      fill(row, item);
      body.appendChild(row);
    });
  }

  function counts(live) {
    var list = document.getElementById("resets");
    while (list.firstChild) {
      list.removeChild(list.firstChild);
    }
    [["reset", live.resets], ["passivated", live.passivations]].forEach(function (pair) {
      Object.keys(pair[1]).sort().forEach(function (reason) {
        var dt = document.createElement("dt");
        dt.textContent = pair[0] + ": " + reason;
        var dd = document.createElement("dd");
        dd.textContent = text(pair[1][reason]);
        list.appendChild(dt);
        list.appendChild(dd);
      });
    });
  }

  function show(live) {
    status.textContent = live.ready ? "ready" : "not ready";
    document.querySelectorAll("[data-field]").forEach(function (node) {
      node.textContent = text(live[node.getAttribute("data-field")]);
    });
    var reasons = document.getElementById("reasons");
    while (reasons.firstChild) {
      reasons.removeChild(reasons.firstChild);
    }
    live.reasons.forEach(function (reason) {
      var item = document.createElement("li");
      item.textContent = reason;
      reasons.appendChild(item);
    });
    rows("platforms", live.platforms, function (row, p) {
      row.className = p.connected ? "open" : "down";
      cell(row, "Platform", p.name);
      cell(row, "State", p.state);
      cell(row, "Last error", p.last_error || "");
      cell(row, "Detail", p.detail.join("; "));
    });
    rows("outbox", live.outbox, function (row, o) {
      cell(row, "Platform", o.platform);
      cell(row, "Inbox waiting", o.inbox_pending, true);
      cell(row, "Inbox oldest (s)", o.inbox_oldest_age_s === null ? null : o.inbox_oldest_age_s.toFixed(1), true);
      cell(row, "Outbox waiting", o.pending, true);
      cell(row, "Outbox oldest (s)", o.oldest_age_s === null ? null : o.oldest_age_s.toFixed(1), true);
    });
    rows("ends", live.recent_ends, function (row, e) {
      cell(row, "Ended", e.at === null ? null : new Date(e.at * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC");
      cell(row, "Reason", e.reason || "");
      cell(row, "Platform", e.source);
      cell(row, "Conversation", e.title || e.id);
    });
    counts(live);
    document.getElementById("live-updated").textContent = new Date().toISOString().replace("T", " ").slice(0, 19) + " UTC";
    document.body.setAttribute("data-refreshed", String(Date.now()));
  }

  function poll() {
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 401) {
          window.location.href = "/console/login?next=" + encodeURIComponent("/console/live");
          return null;
        }
        return response.ok ? response.json() : null;
      })
      .then(function (live) {
        if (live) {
          show(live);
        }
      })
      .catch(function () {
        status.textContent = "unreachable";
      })
      .finally(function () {
        window.setTimeout(poll, 2000);
      });
  }

  window.setTimeout(poll, 2000);
})();

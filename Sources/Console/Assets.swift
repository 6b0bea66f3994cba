/// The console's only script and style sheet, served from `/static/` (the Content-Security-Policy
/// allows scripts and styles from the console itself and nothing else: no inline code, no CDN).
enum Assets {
    static let css = """
        :root { color-scheme: light dark; --ok: #2e7d32; --warn: #b26a00; --bad: #c62828; --muted: #777; }
        body { font: 14px/1.4 system-ui, sans-serif; margin: 0; }
        header { padding: 8px 16px; border-bottom: 1px solid #8884; display: flex; gap: 24px; align-items: baseline; }
        nav a { margin-right: 12px; } nav a.current { font-weight: bold; text-decoration: none; }
        main { padding: 8px 16px 32px; }
        table { border-collapse: collapse; margin: 8px 0 16px; }
        th, td { padding: 3px 8px; border-bottom: 1px solid #8883; text-align: left; vertical-align: top; }
        th { font-weight: 600; white-space: nowrap; }
        td[data-field="lag"], td[data-field="in"], td[data-field="out"], td[data-field="arrivals"], td.count { text-align: right; font-variant-numeric: tabular-nums; }
        .status { font-weight: 600; padding: 0 4px; border-radius: 3px; }
        .status-OK { color: var(--ok); } .status-WARN { color: var(--warn); }
        .status-STALL, .status-STOP, .status-REWIND, .status-ERR { color: #fff; background: var(--bad); }
        .muted { color: var(--muted); } .error, .warning { color: var(--bad); }
        .spark { color: #1565c0; } .chart { margin: 8px 0 16px; } .chart svg { color: #1565c0; border: 1px solid #8883; }
        pre.value { background: #8881; padding: 8px; max-width: 100ch; overflow: auto; white-space: pre-wrap; word-break: break-all; }
        dl { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; } dt { font-weight: 600; }
        form.filter label { margin-right: 12px; } .key { font-family: monospace; }
        tr.arrived { background: #1565c01a; }
        .charts { display: flex; flex-wrap: wrap; gap: 0 24px; }
        table.records td { white-space: nowrap; } table.records td.key { white-space: normal; overflow-wrap: anywhere; max-width: 70ch; }
        """

    /// Updates the overview's cells every 5 s from /api/stages, as text (never as HTML), and not
    /// while the operator selects text or uses a form: the page does not move under them.
    static let js = """
        (function () {
          'use strict';
          function busy() {
            var selection = window.getSelection();
            if (selection && selection.toString().length > 0) return true;
            var active = document.activeElement;
            return !!active && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(active.tagName);
          }
          function refresh() {
            if (busy()) return;
            fetch('/api/stages', { credentials: 'same-origin', headers: { 'Accept': 'application/json' } })
              .then(function (response) { return response.ok ? response.json() : null; })
              .then(function (data) {
                if (!data || busy()) return;
                data.stages.forEach(function (row) {
                  var tr = document.querySelector('tr[data-stage="' + CSS.escape(row.stage) + '"]');
                  if (!tr) return;
                  Object.keys(row.cells).forEach(function (field) {
                    var cell = tr.querySelector('[data-field="' + field + '"]');
                    if (cell && cell.textContent !== row.cells[field]) cell.textContent = row.cells[field];
                  });
                  var verdict = tr.querySelector('[data-field="verdict"]');
                  if (verdict) verdict.className = 'status status-' + row.status;
                });
                var updated = document.getElementById('updated');
                if (updated) updated.textContent = data.updated;
              })
              .catch(function () {});
          }
          if (document.body.dataset.live === 'stages') window.setInterval(refresh, 5000);

          // The topic page's live tail: what arrived after the newest record shown, added at the
          // top as text, every 2 s.
          var tailing = false;
          function tail() {
            var table = document.querySelector('table.records[data-topic]');
            if (!table || tailing || busy()) return;
            tailing = true;
            var url = '/api/topics/' + encodeURIComponent(table.dataset.topic) + '/tail?after=' + encodeURIComponent(table.dataset.after) +
              (table.dataset.filter ? '&' + table.dataset.filter : '');
            fetch(url, { credentials: 'same-origin', headers: { 'Accept': 'application/json' } })
              .then(function (response) { return response.ok ? response.json() : null; })
              .then(function (data) {
                tailing = false;
                if (!data) return;
                var body = table.tBodies[0];
                data.records.forEach(function (r) {
                  var tr = document.createElement('tr');
                  tr.dataset.offset = r.partition + ':' + r.offset;
                  tr.className = 'arrived';
                  [r.written, String(r.partition), String(r.offset), r.key, r.value, String(r.headers)].forEach(function (text, i) {
                    var td = document.createElement('td');
                    td.textContent = text;
                    if (i === 3 || i === 4) td.className = 'key';
                    tr.appendChild(td);
                  });
                  var link = document.createElement('a');
                  link.href = r.link;
                  link.textContent = 'whole record';
                  var last = document.createElement('td');
                  last.appendChild(link);
                  tr.appendChild(last);
                  body.insertBefore(tr, body.firstChild);
                });
                table.dataset.after = data.after;
              })
              .catch(function () { tailing = false; });
          }
          if (document.body.dataset.live === 'tail') window.setInterval(tail, 2000);
        })();
        """
}

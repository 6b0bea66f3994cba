import Foundation
import Operations
import Workers

/// The console's pages, rendered on the server. Everything that comes from Kafka (keys, values,
/// headers, names, reasons) is attacker-controlled: it reaches the page only through
/// ``HTML/text(_:)`` (escaped) and never inside a script, a style or an unquoted attribute.
public enum HTML {
    /// `s` escaped for HTML text and double-quoted attribute values.
    public static func text(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for c in s.unicodeScalars {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    /// Bytes as text: UTF-8 where they are (invalid sequences shown as U+FFFD), and whether they were valid.
    public static func bytes(_ b: [UInt8]) -> (text: String, valid: Bool) {
        if let s = String(validating: b, as: UTF8.self) { return (s, true) }
        return (String(decoding: b, as: UTF8.self), false)
    }

    /// A query string value.
    static func query(_ s: String) -> String {
        s.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? ""
    }

    static func page(title: String, nav: String, live: String? = nil, body: String) -> String {
        let links = [("/", "Stages"), ("/workers", "Workers"), ("/dead-letters", "Dead letters"), ("/redrives", "Redrives"), ("/topics", "Topics"), ("/find", "Find a message")].map { href, name in
            "<a href=\"\(href)\"\(href == nav ? " class=\"current\"" : "")>\(name)</a>"
        }.joined(separator: " ")
        // Signed in with a token: who, as what, and the way out.
        let user = CurrentUser.user
        let who = user == .loopback ? "" : """
             <span class="who">\(text(user.name)) (\(user.role.rawValue))</span> \
            <form method="post" action="/logout" class="signout"><button type="submit">Sign out</button></form>
            """
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(text(title)) · pipeline console</title>
            <link rel="stylesheet" href="/static/console.css"><script src="/static/console.js" defer></script></head>
            <body\(live.map { " data-live=\"\(text($0))\"" } ?? "")><header><strong>pipeline console</strong> <nav>\(links)</nav>\(who)</header>
            <main>\(body)</main></body></html>
            """
    }

    // MARK: Formatting (one definition: the pages and the live JSON use these)

    static func count(_ n: Int64?) -> String { n.map(LagVerdict.grouped) ?? "–" }

    static func seconds(_ s: Double?) -> String {
        guard let s else { return "–" }
        if s < 10 { return String(format: "%.1f s", s) }
        if s < 120 { return "\(Int(s)) s" }
        if s < 7200 { return "\(Int(s) / 60) m \(Int(s) % 60) s" }
        if s < 172_800 { return "\(Int(s) / 3600) h \(Int(s) % 3600 / 60) m" }
        return "\(Int(s) / 86400) d \(Int(s) % 86400 / 3600) h"
    }

    static func rate(_ r: Double) -> String { r < 10 ? String(format: "%.1f/s", r) : "\(LagVerdict.grouped(Int64(r.rounded())))/s" }

    static func time(_ ms: Int64?) -> String {
        guard let ms else { return "–" }
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd HH:mm:ss'Z'"
        return f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }

    /// A time as a form field gives it back: ISO-8601 to the second, epoch ms when it has milliseconds.
    static func isoTime(_ ms: Int64) -> String {
        guard ms % 1000 == 0 else { return String(ms) }
        let f = ISO8601DateFormatter()
        f.timeZone = TimeZone(identifier: "UTC")
        return f.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }

    // MARK: Charts

    /// A line chart over time as SVG (no script, no inline style), with labelled axes: the
    /// value axis says what is measured and in which unit (`axis`), from 0 to the largest value;
    /// the time axis the first and last sample's time (UTC). `data-points` says how many points
    /// it has; points without a value (no worker reported) are left out.
    static func chart(
        _ points: [(time: Int64, value: Double?)], width: Int = 600, height: Int = 120, label: String, axis: String? = nil,
        format: (Double) -> String
    ) -> String {
        let points = points.compactMap { p in p.value.map { (time: p.time, value: $0.isFinite ? $0 : 0) } }
        guard let first = points.first, let last = points.last else {
            return "<figure class=\"chart\"><figcaption>\(text(label))</figcaption><p class=\"muted\">no samples yet</p></figure>"
        }
        let left = 70, bottom = 34, top = 8
        let maxValue = max(points.map(\.value).max() ?? 0, 1)
        let span = max(Double(last.time - first.time), 1)
        let plotHeight = Double(height - top)
        let coordinates = points.map { p -> String in
            let x = Double(left) + (points.count == 1 ? 0 : Double(p.time - first.time) / span * Double(width))
            let y = Double(top) + plotHeight - p.value / maxValue * plotHeight
            return String(format: "%.1f,%.1f", x, y)
        }.joined(separator: " ")
        let w = left + width + 10, h = height + bottom
        let axisTitle = text(axis ?? label)
        return """
            <figure class="chart"><figcaption>\(text(label)): \(text(format(last.value))) now, max \(text(format(maxValue)))</figcaption>\
            <svg viewBox="0 0 \(w) \(h)" width="\(w)" height="\(h)" role="img" aria-label="\(text(label)) over time" data-points="\(points.count)">\
            <line class="axis-line" x1="\(left)" y1="\(top)" x2="\(left)" y2="\(height)" stroke="currentColor" stroke-opacity="0.4"/>\
            <line class="axis-line" x1="\(left)" y1="\(height)" x2="\(left + width)" y2="\(height)" stroke="currentColor" stroke-opacity="0.4"/>\
            <text class="y-max" x="\(left - 4)" y="\(top + 10)" text-anchor="end" font-size="11" fill="currentColor">\(text(format(maxValue)))</text>\
            <text class="y-zero" x="\(left - 4)" y="\(height)" text-anchor="end" font-size="11" fill="currentColor">0</text>\
            <text class="y-title" x="12" y="\(top + (height - top) / 2)" text-anchor="middle" font-size="11" fill="currentColor" \
            transform="rotate(-90 12 \(top + (height - top) / 2))">\(axisTitle)</text>\
            <text class="x-first" x="\(left)" y="\(height + 14)" font-size="11" fill="currentColor">\(text(time(first.time)))</text>\
            <text class="x-last" x="\(left + width)" y="\(height + 14)" text-anchor="end" font-size="11" fill="currentColor">\(text(time(last.time)))</text>\
            <text class="x-title" x="\(left + width / 2)" y="\(height + 30)" text-anchor="middle" font-size="11" fill="currentColor">time (UTC)</text>\
            <polyline class="line" fill="none" stroke="currentColor" stroke-width="2" points="\(coordinates)"/></svg></figure>
            """
    }

    static func sparkline(_ values: [Double]) -> String {
        guard values.count > 1 else { return "<svg class=\"spark\" viewBox=\"0 0 100 20\" width=\"100\" height=\"20\" data-points=\"\(values.count)\"></svg>" }
        let top = max(values.max() ?? 0, 1)
        let coordinates = values.enumerated().map { i, v in
            String(format: "%.1f,%.1f", Double(i) / Double(values.count - 1) * 100, 19 - v / top * 18)
        }.joined(separator: " ")
        return "<svg class=\"spark\" viewBox=\"0 0 100 20\" width=\"100\" height=\"20\" data-points=\"\(values.count)\"><polyline fill=\"none\" stroke=\"currentColor\" stroke-width=\"1.5\" points=\"\(coordinates)\"/></svg>"
    }
}

/// The pages over the console's state and the dead letters.
struct ConsolePages {
    let state: ConsoleState

    /// The cells of a stage's overview row, formatted; the page and `/api/stages` both use them.
    static func cells(_ r: StageRow) -> [String: String] {
        [
            "members": r.members.map(String.init) ?? "–",
            "partitions": String(r.partitions),
            "in": HTML.rate(r.inRate),
            "arrivals": HTML.rate(r.arrivalRate),
            "out": r.outRate.map(HTML.rate) ?? "–",
            "lag": HTML.count(r.lagRecords),
            "lag-seconds": HTML.seconds(r.lagSeconds),
            "drain": r.secondsToDrain.map { $0 == 0 ? "0 s" : HTML.seconds($0) } ?? "not draining",
            "verdict": r.status.isEmpty ? "–" : r.status,
            "reason": r.reason,
        ]
    }

    func overview(now: Int64) -> String {
        let rows = state.rows()
        var body = """
            <h1>Stages</h1>
            <p class="muted">\(rows.count) stages of the topology, worst first\(Self.tally(rows)). Lag as <code>pipelinectl lag</code> computes it \
            (Burrow's rules), sampled without joining the groups; lag in time is now minus the timestamp of the first record not yet consumed. \
            Updated <span id="updated">\(HTML.text(HTML.time(now)))</span>.</p>
            <table class="stages"><thead><tr><th>stage</th><th>group</th><th>workers</th><th>partitions</th><th>arrivals</th><th>in</th><th>out</th>\
            <th>lag</th><th>lag (time)</th><th>time to drain</th><th>last hour</th><th>verdict</th></tr></thead><tbody>
            """
        for r in rows {
            let c = Self.cells(r)
            let spark = HTML.sparkline(state.history(r.stage, tier: 1, now: now).map(\.lagRecords))
            body += """
                <tr data-stage="\(HTML.text(r.stage))"><td><a href="/stages/\(HTML.query(r.stage))">\(HTML.text(r.stage))</a></td>\
                <td>\(HTML.text(r.group))</td><td data-field="members">\(HTML.text(c["members"]!))</td>\
                <td data-field="partitions">\(HTML.text(c["partitions"]!))</td><td data-field="arrivals">\(HTML.text(c["arrivals"]!))</td>\
                <td data-field="in">\(HTML.text(c["in"]!))</td><td data-field="out">\(HTML.text(c["out"]!))</td><td data-field="lag">\(HTML.text(c["lag"]!))</td>\
                <td data-field="lag-seconds">\(HTML.text(c["lag-seconds"]!))</td><td data-field="drain">\(HTML.text(c["drain"]!))</td>\
                <td>\(spark)</td><td class="verdict"><span data-field="verdict" class="status status-\(HTML.text(r.status))">\(HTML.text(c["verdict"]!))</span> \
                <span data-field="reason">\(HTML.text(c["reason"]!))</span></td></tr>
                """
        }
        body += "</tbody></table>"
        return HTML.page(title: "Stages", nav: "/", live: "stages", body: body)
    }

    /// ": 1 STOP, 17 OK" (statuses worst first), or "" before any sample.
    static func tally(_ rows: [StageRow]) -> String {
        var counts: [String: Int] = [:]
        for r in rows where !r.status.isEmpty { counts[r.status, default: 0] += 1 }
        let order = PartitionLagStatus.allCases.sorted { $0 > $1 }.map(\.rawValue)
        let parts = order.compactMap { s in counts[s].map { "\($0) \(s)" } }
        let idle = rows.filter { $0.status.isEmpty && $0.sampledAt != nil }.count
        let all = parts + (idle > 0 ? ["\(idle) without commits"] : [])
        return all.isEmpty ? "" : ": " + all.joined(separator: ", ")
    }

    /// A stage: its verdict, its charts over the chosen tier (lag, rates, dead letters, errors,
    /// end-to-end latency as its workers report them), its workers, its outputs per topic, its
    /// partitions and its newest dead letters (`deadLetters`: every dead letter read).
    func stage(_ name: String, tier: Int, now: Int64, deadLetters: [DeadLetterEntry], deadLetterError: String?) -> String? {
        guard let r = state.row(name) else { return nil }
        let roster = state.roster
        let figures = roster.figures(stage: name)
        let tierLinks = LagHistory.tiers.enumerated().map { i, t in
            i == tier ? "<strong>\(t.name)</strong>" : "<a href=\"/stages/\(HTML.query(name))?tier=\(i)\">\(t.name)</a>"
        }.joined(separator: " · ")
        let points = state.history(name, tier: tier, now: now)
        func ms(_ v: Double) -> String { v < 10 ? String(format: "%.1f ms", v) : "\(LagVerdict.grouped(Int64(v.rounded()))) ms" }
        var body = """
            <h1>\(HTML.text(name))</h1>
            <p>group <code>\(HTML.text(r.group))</code>, inputs \(r.inputs.map { "<a href=\"/topics/\(HTML.query($0))\"><code>\(HTML.text($0))</code></a>" }.joined(separator: ", ")). \
            <span class="status status-\(HTML.text(r.status))">\(HTML.text(r.status.isEmpty ? "–" : r.status))</span> \(HTML.text(r.reason))</p>
            <p>History: \(tierLinks) · <a href="/stages/\(HTML.query(name))/reset">Reset offsets…</a></p>
            <section class="charts">
            \(HTML.chart(points.map { ($0.time, $0.lagRecords) }, label: "lag (records)", axis: "records", format: { HTML.count(Int64($0)) }))
            \(HTML.chart(points.map { ($0.time, $0.lagSeconds) }, label: "lag (time)", axis: "seconds", format: { HTML.seconds($0) }))
            \(HTML.chart(points.map { ($0.time, $0.inRate) }, label: "records in per second", axis: "records/s", format: HTML.rate))
            \(HTML.chart(points.map { ($0.time, $0.outRate) }, label: "outputs per second", axis: "records/s", format: HTML.rate))
            \(HTML.chart(points.map { ($0.time, $0.deadLetterRate) }, label: "dead letters per second", axis: "dead letters/s", format: HTML.rate))
            \(HTML.chart(points.map { ($0.time, $0.errorRate) }, label: "errors per second (failed deliveries and commits)", axis: "errors/s", format: HTML.rate))
            \(HTML.chart(points.map { ($0.time, $0.latencyMeanMs) }, label: "end-to-end latency, mean (input record's time to its outputs delivered)", axis: "ms", format: ms))
            </section>
            """
        // The workers.
        let workers = roster.rows.filter { $0.status.stage == name }
        body += "<h2>Workers</h2>"
        if workers.isEmpty {
            body += "<p class=\"muted\" id=\"no-workers\">No worker of this stage has reported (<a href=\"/workers\">all workers</a>).</p>"
        } else {
            body += """
                <table class="workers"><thead><tr><th>host</th><th>pid</th><th>state</th><th>partitions</th><th>in</th><th>out</th>\
                <th>dead letters</th><th>dead letters/s</th><th>errors/s</th><th>latency mean</th><th>latency max</th><th>last report</th><th>last error</th></tr></thead><tbody>
                """
            for row in workers {
                let s = row.status
                body += """
                    <tr data-worker="\(HTML.text(s.key))"><td>\(HTML.text(s.host))</td><td>\(s.pid)</td>\
                    <td class="state"><span class="status status-\(row.alive ? "OK" : "STOP")">\(row.alive ? "alive" : "dead")</span></td>\
                    <td>\(s.assignedPartitions)</td><td>\(HTML.text(HTML.rate(s.inRate)))</td><td>\(HTML.text(HTML.rate(s.outRate)))</td>\
                    <td>\(HTML.count(Int64(s.deadLettered)))</td><td>\(HTML.text(s.deadLetterRate.map(HTML.rate) ?? "–"))</td>\
                    <td>\(HTML.text(s.errorRate.map(HTML.rate) ?? "–"))</td><td>\(HTML.text(s.latencyMeanMs.map(ms) ?? "–"))</td>\
                    <td>\(HTML.text(s.latencyMaxMs.map(ms) ?? "–"))</td>\
                    <td>\(HTML.text(HTML.seconds(Double(now - s.reportedAt) / 1000))) ago</td><td>\(HTML.text(s.lastError ?? ""))</td></tr>
                    """
            }
            body += "</tbody></table>"
        }
        // Its outputs per topic, as its live workers report them.
        body += "<h2>Outputs</h2>"
        if let figures, !figures.outRates.isEmpty {
            body += "<table class=\"outputs\"><thead><tr><th>topic</th><th>records per second</th></tr></thead><tbody>"
            for (topic, rate) in figures.outRates.sorted(by: { $0.key < $1.key }) {
                body += "<tr data-topic=\"\(HTML.text(topic))\"><td><a href=\"/topics/\(HTML.query(topic))\">\(HTML.text(topic))</a></td><td class=\"count\">\(HTML.text(HTML.rate(rate)))</td></tr>"
            }
            body += "</tbody></table>"
        } else {
            body += "<p class=\"muted\">No live worker reports outputs.</p>"
        }
        // Its partitions.
        body += """
            <h2>Partitions</h2><table><thead><tr><th>topic</th><th>partition</th><th>committed</th><th>log end</th><th>lag</th>\
            <th title="how long ago the log end passed the committed offset">lag (time)</th>\
            <th title="now minus the first unconsumed record's own timestamp">first waiting record's age</th>\
            <th>owner</th><th>verdict</th><th>last 5 min</th></tr></thead><tbody>
            """
        for row in r.partitionRows {
            let p = row.lag
            let spark = HTML.sparkline(state.history("\(name)/\(p.topic)/\(p.partition)", tier: 0, now: now).map(\.lagRecords))
            body += """
                <tr><td>\(HTML.text(p.topic))</td><td>\(p.partition)</td><td>\(HTML.count(p.committed))</td><td>\(HTML.count(p.logEnd))</td>\
                <td>\(HTML.count(p.lagRecords))</td><td>\(HTML.text(HTML.seconds(p.lagSeconds)))</td>\
                <td>\(HTML.text(HTML.seconds(p.recordAgeSeconds)))</td><td>\(HTML.text(p.owner ?? "–"))</td>\
                <td><span class="status status-\(p.status.rawValue)">\(p.status.rawValue)</span> \(HTML.text(row.reason))</td><td>\(spark)</td></tr>
                """
        }
        body += "</tbody></table>"
        if let error = r.error { body += "<p class=\"error\">\(HTML.text(error))</p>" }
        // Its dead letters.
        let mine = deadLetters.filter { $0.letter.stage == name }.sorted { ($0.record.timestamp ?? 0) > ($1.record.timestamp ?? 0) }
        body += "<h2>Dead letters</h2>"
        if let deadLetterError { body += "<p class=\"error\">cannot read the dead letters: \(HTML.text(deadLetterError))</p>" }
        if mine.isEmpty {
            body += "<p class=\"muted\" id=\"stage-dead-letters\">None.</p>"
        } else {
            var reasons: [String: Int] = [:]
            for e in mine { reasons[e.letter.failure.reason.rawValue, default: 0] += 1 }
            body += """
                <p id="stage-dead-letters">\(mine.count) dead letters: \(HTML.text(reasons.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.map { "\($0.value) \($0.key)" }.joined(separator: ", "))) · \
                <a href="/dead-letters?stage=\(HTML.query(name))">all of them, to triage or redrive</a></p>
                <table class="letters"><thead><tr><th>written</th><th>reason</th><th>field</th><th>origin</th><th>key</th><th></th></tr></thead><tbody>
                """
            for e in mine.prefix(10) {
                let key = e.letter.key.map { HTML.bytes($0).text } ?? "(none)"
                body += """
                    <tr><td>\(HTML.text(HTML.time(e.record.timestamp)))</td><td>\(HTML.text(e.letter.failure.reason.rawValue))</td>\
                    <td>\(HTML.text(e.letter.failure.field))</td><td>\(HTML.text("\(e.letter.origin.topic)[\(e.letter.origin.partition)]@\(e.letter.origin.offset)"))</td>\
                    <td class="key">\(HTML.text(String(key.prefix(80))))</td><td><a href="/dead-letters/\(e.record.partition)/\(e.record.offset)">open</a></td></tr>
                    """
            }
            body += "</tbody></table>"
        }
        return HTML.page(title: name, nav: "/stages", body: body)
    }

    /// Hidden inputs carrying a selection and the CSRF token into a POST form.
    static func hidden(_ selection: DeadLetterSelection, csrf: String, extra: [(String, String)] = []) -> String {
        (DeadLetterSelection.queryNames.map { ($0, selection.value($0)) } + [("csrf", csrf)] + extra).map { name, value in
            "<input type=\"hidden\" name=\"\(name)\" value=\"\(HTML.text(value))\">"
        }.joined()
    }

    /// `actions`: the CSRF token when redrives are allowed, nil with --read-only.
    func deadLetters(_ entries: [DeadLetterEntry], filter: DeadLetterSelection, redrives: [RedriveRecord], actions csrf: String?, readError: String?) -> String {
        let selected = entries.filter(filter.matches)
        let redriven = selected.filter { e in redrives.contains { $0.covers(e) } }.count
        let groups = DeadLetterGroup.groups(selected)
        func option(_ name: String, _ values: Set<String>, _ current: String) -> String {
            "<label>\(name) <select name=\"\(name)\"><option value=\"\">any</option>"
                + values.sorted().map { "<option value=\"\(HTML.text($0))\"\($0 == current ? " selected" : "")>\(HTML.text($0))</option>" }.joined()
                + "</select></label>"
        }
        var body = """
            <h1>Dead letters</h1>
            <form method="get" action="/dead-letters" class="filter">\
            \(option("stage", Set(entries.map(\.letter.stage)), filter.value("stage")))\
            \(option("reason", Set(entries.map(\.letter.failure.reason.rawValue)), filter.value("reason")))\
            \(option("origin", Set(entries.map(\.letter.origin.topic)), filter.value("origin")))\
            \(option("field", Set(entries.map(\.letter.failure.field)), filter.value("field")))\
            <label>key <input name="key" value="\(HTML.text(filter.value("key")))" placeholder="the original record's key"></label>\
            <label>since <input name="since" value="\(HTML.text(filter.since.map { HTML.isoTime($0) } ?? ""))" placeholder="ISO-8601 or epoch ms" size="22"></label>\
            <label>until <input name="until" value="\(HTML.text(filter.until.map { HTML.isoTime($0) } ?? ""))" placeholder="the records' own time" size="22"></label>\
            \(filter.letters.isEmpty ? "" : "<input type=\"hidden\" name=\"letter\" value=\"\(HTML.text(filter.value("letter")))\">")\
            <button type="submit">Filter</button> <a href="/dead-letters">clear</a></form>
            <p class="muted">\(selected.count) of \(entries.count) dead letters\(filter.isEverything ? "" : " match")\(redriven > 0 ? ", \(redriven) of them redriven already" : ""). \
            Grouped by stage, reason, field and origin topic.</p>
            """
        if let csrf, selected.count > redriven {
            body += """
                <form method="post" action="/dead-letters/redrive/preview" class="action">\(Self.hidden(filter, csrf: csrf))\
                <button type="submit" id="preview-redrive">Preview a redrive of the \(selected.count - redriven) listed</button> \
                <span class="muted">(nothing is sent before you confirm)</span></form>
                """
        }
        if let readError { body += "<p class=\"error\">cannot read the dead letters: \(HTML.text(readError))</p>" }
        body += "<table class=\"groups\"><thead><tr><th>stage</th><th>reason</th><th>field</th><th>origin topic</th><th>count</th><th>first seen</th><th>last seen</th><th></th></tr></thead><tbody>"
        for g in groups {
            let filterLink = "/dead-letters?stage=\(HTML.query(g.stage))&reason=\(HTML.query(g.reason))&field=\(HTML.query(g.field))&origin=\(HTML.query(g.originTopic))"
            body += """
                <tr data-reason="\(HTML.text(g.reason))"><td>\(HTML.text(g.stage))</td><td>\(HTML.text(g.reason))</td><td>\(HTML.text(g.field))</td>\
                <td>\(HTML.text(g.originTopic))</td><td class="count"><a href="\(HTML.text(filterLink))">\(g.count)</a></td>\
                <td>\(HTML.text(HTML.time(g.firstSeen)))</td><td>\(HTML.text(HTML.time(g.lastSeen)))</td>\
                <td><a href="/dead-letters/\(g.latest.partition)/\(g.latest.offset)">newest</a></td></tr>
                """
        }
        body += "</tbody></table><h2>Newest</h2><table class=\"letters\"><thead><tr><th>written</th><th>stage</th><th>reason</th><th>field</th><th>origin</th><th>key</th><th>redriven</th><th></th></tr></thead><tbody>"
        for e in selected.sorted(by: { ($0.record.timestamp ?? 0) > ($1.record.timestamp ?? 0) }).prefix(100) {
            let key = e.letter.key.map { HTML.bytes($0).text } ?? "(none)"
            body += """
                <tr><td>\(HTML.text(HTML.time(e.record.timestamp)))</td><td>\(HTML.text(e.letter.stage))</td><td>\(HTML.text(e.letter.failure.reason.rawValue))</td>\
                <td>\(HTML.text(e.letter.failure.field))</td><td>\(HTML.text("\(e.letter.origin.topic)[\(e.letter.origin.partition)]@\(e.letter.origin.offset)"))</td>\
                <td class="key">\(HTML.text(String(key.prefix(80))))</td>\
                <td>\(redrives.contains { $0.covers(e) } ? "yes, by the console" : (e.redriveCount > 0 ? "was redriven \(e.redriveCount)×" : ""))</td>\
                <td><a href="/dead-letters/\(e.record.partition)/\(e.record.offset)">open</a></td></tr>
                """
        }
        body += "</tbody></table>"
        return HTML.page(title: "Dead letters", nav: "/dead-letters", body: body)
    }

    /// What a redrive would do, and the button that does it (with the count previewed, so that a
    /// selection that changed in between is previewed again rather than sent).
    func redrivePreview(_ selection: DeadLetterSelection, plan: RedrivePlan, alreadyRedriven: Int, csrf: String, note: String?) -> String {
        var body = "<h1>Redrive preview</h1>"
        if let note { body += "<p class=\"warning\">\(HTML.text(note))</p>" }
        body += """
            <p>Selection: \(selection.isEverything ? "every dead letter" : HTML.text(DeadLetterSelection.queryNames.filter { !selection.value($0).isEmpty }.map { "\($0) \(selection.value($0))" }.joined(separator: ", "))). \
            <span id="redrive-count">\(plan.sends.count)</span> records go back to their origin (original key, value, timestamp and \
            headers, <code>dead-letter.redriven</code> counting the redrives); \(plan.exhausted.count) were redriven \(plan.maxRedrives) times already \
            and are left (<code>--max-redrives</code>)\(alreadyRedriven > 0 ? "; \(alreadyRedriven) the console redrove or marked handled before are not sent again" : "")\(plan.refused.isEmpty ? "" : "; <span id=\"refused-count\">\(plan.refused.count)</span> are left because they would go to a topic their stage neither reads nor writes").</p>
            \(plan.refused.isEmpty ? "" : "<ul class=\"refused\">" + plan.refused.prefix(20).map { "<li>\(HTML.text(DeadLetterSelection.address($0.entry))): \(HTML.text($0.reason))</li>" }.joined() + "</ul>")
            <ul class="audiences">\(plan.audiences.map { "<li>\($0.count) processed again by \(HTML.text($0.seenBy))</li>" }.joined())</ul>
            <table class="destinations"><thead><tr><th>topic</th><th>partition</th><th>records</th></tr></thead><tbody>
            """
        for d in plan.destinations {
            body += "<tr><td>\(HTML.text(d.topic))</td><td>\(d.partition.map(String.init) ?? "by key")</td><td class=\"count\">\(d.count)</td></tr>"
        }
        body += """
            </tbody></table>
            <p>The same from the command line: <code>pipelinectl dlq redrive \(HTML.text(selection.flags)) --max-redrives \(plan.maxRedrives) --execute</code>\
            \(plan.refused.isEmpty ? "" : " (it reads no topology: it would send the \(plan.refused.count) left above too)").</p>
            """
        if plan.sends.isEmpty {
            body += "<p>Nothing to send.</p>"
        } else {
            body += """
                <form method="post" action="/dead-letters/redrive" class="action">\(Self.hidden(selection, csrf: csrf, extra: [("expected", String(plan.sends.count))]))\
                <button type="submit" id="execute-redrive">Redrive \(plan.sends.count) records</button></form>
                """
        }
        body += "<p><a href=\"/dead-letters\">back to the dead letters</a></p>"
        return HTML.page(title: "Redrive preview", nav: "/dead-letters", body: body)
    }

    func redriveDone(_ record: RedriveRecord) -> String {
        HTML.page(title: "Redrive", nav: "/redrives", body: """
            <h1>Redrive done</h1>
            <p>Sent <span id="redriven">\(record.sent)</span> records back to their origin\(record.failed > 0 ? "; \(record.failed) were not delivered" : ""); \
            \(record.exhausted) left (redriven \(record.maxRedrives) times already). Recorded in the redrive log.</p>
            <p><a href="/redrives">all redrives</a> · <a href="/dead-letters">dead letters</a></p>
            """)
    }

    func redrives(_ records: [RedriveRecord], topic: String, readError: String?) -> String {
        var body = "<h1>Redrives</h1><p class=\"muted\">Every redrive the console executed and every dead letter marked handled, newest first, from the topic <code>\(HTML.text(topic))</code>.</p>"
        if let readError { body += "<p class=\"error\">cannot read the redrive log: \(HTML.text(readError))</p>" }
        body += "<table class=\"redrives\"><thead><tr><th>when</th><th>who</th><th>what</th><th>selection</th><th>sent</th><th>failed</th><th>left</th></tr></thead><tbody>"
        for r in records.sorted(by: { $0.time > $1.time }) {
            let selection = r.selection.isEverything ? "every dead letter" : DeadLetterSelection.queryNames.filter { !r.selection.value($0).isEmpty }.map { "\($0) \(r.selection.value($0))" }.joined(separator: ", ")
            body += "<tr><td>\(HTML.text(HTML.time(r.time)))</td><td>\(HTML.text(r.who))</td><td>\(r.markedHandled ? "marked handled" : "redrive")</td><td>\(HTML.text(selection))</td><td class=\"count\">\(r.sent)</td><td class=\"count\">\(r.failed)</td><td class=\"count\">\(r.exhausted)</td></tr>"
        }
        body += "</tbody></table>"
        return HTML.page(title: "Redrives", nav: "/redrives", body: body)
    }

    /// The reset form; with a prepared reset, its diff per partition and (when allowed) the
    /// button that commits it. `request` holds the form's values (topic, to, value).
    func reset(stage: StageRow, request: [String: String], prepared: PreparedOffsetReset?, error: String?, csrf: String?, done: Bool) -> String {
        let topic = request["topic"] ?? stage.inputs.first ?? ""
        let to = request["to"] ?? "earliest"
        let targets = [("earliest", "the first offset still stored"), ("latest", "the log end (skip everything)"),
                       ("datetime", "the first record at or after a time (ISO-8601 or epoch ms)"), ("shift", "move by N records (negative: back)"),
                       ("offset", "this offset")]
        var body = """
            <h1>Reset offsets of \(HTML.text(stage.stage))</h1>
            <p>Group <code>\(HTML.text(stage.group))</code>. A reset moves the group's committed offsets: back re-reads records, forward skips them. \
            It is refused while the group has members: stop its workers first. Nothing changes until you confirm.</p>
            <form method="get" action="/stages/\(HTML.query(stage.stage))/reset" class="filter">\
            <label>topic <select name="topic">\(stage.inputs.map { "<option\($0 == topic ? " selected" : "")>\(HTML.text($0))</option>" }.joined())</select></label>\
            <label>to <select name="to">\(targets.map { "<option value=\"\($0.0)\"\($0.0 == to ? " selected" : "")>\(HTML.text($0.1))</option>" }.joined())</select></label>\
            <label>value <input name="value" value="\(HTML.text(request["value"] ?? ""))" size="24"></label>\
            <button type="submit" id="show-diff">Show the diff</button></form>
            """
        if let error { body += "<p class=\"error\">\(HTML.text(error))</p>" }
        guard let prepared else { return HTML.page(title: "Reset offsets", nav: "/stages", body: body) }
        if done { body += "<p id=\"reset-done\" class=\"status status-OK\">Committed the new offsets.</p>" }
        body += """
            <table class="diff"><thead><tr><th>partition</th><th>committed</th><th>new</th><th>move</th><th>records</th><th>time span of those records</th></tr></thead><tbody>
            """
        var reread: Int64 = 0, skipped: Int64 = 0
        for p in prepared.plan {
            let n = PreparedOffsetReset.records(p)
            if let n { if n > 0 { reread += n } else { skipped -= n } }
            let what = n.map { $0 > 0 ? "\(HTML.count($0)) re-read" : ($0 < 0 ? "\(HTML.count(-$0)) skipped" : "none") } ?? "no committed offset"
            let ts = prepared.timestamps[p.topicPartition]
            let span = ts.map { "\(HTML.time($0.first)) → \(HTML.time($0.last))" } ?? "–"
            body += """
                <tr data-partition="\(p.partition)"><td>\(p.partition)</td><td>\(HTML.count(p.current))</td><td>\(HTML.count(p.target))</td>\
                <td>\(p.current.map { String(format: "%+lld", p.target - $0) } ?? "–")</td><td class="records">\(what)</td><td>\(HTML.text(span))</td></tr>
                """
        }
        body += "</tbody></table><p>In all: <span id=\"reread\">\(reread)</span> records re-read, <span id=\"skipped\">\(skipped)</span> skipped.</p>"
        var cli = "pipelinectl groups reset-offsets \(prepared.group) --topic \(prepared.topic)"
        switch to {
        case "latest": cli += " --to-latest"
        case "datetime": cli += " --to-datetime '\(request["value"] ?? "")'"
        case "shift": cli += " --shift-by \(request["value"] ?? "")"
        case "offset": cli += " --to-offset \(request["value"] ?? "")"
        default: cli += " --to-earliest"
        }
        body += "<p>The same from the command line: <code>\(HTML.text(cli)) --execute</code> (without <code>--execute</code>: this diff).</p>"
        if let note = prepared.coarseNote { body += "<p class=\"warning\" id=\"coarse\">Note: \(HTML.text(note)).</p>" }
        if !prepared.members.isEmpty {
            body += "<p class=\"warning\" id=\"refused\">Refused while the group has members (\(HTML.text(prepared.members.joined(separator: ", ")))): stop them first.</p>"
        } else if let live = stage.members, live > 0 {
            // The broker may list no members of an active group (tansu does); the workers' own
            // reports say they are there.
            body += "<p class=\"warning\" id=\"refused\">Refused while \(live) worker\(live == 1 ? "" : "s") of this stage report\(live == 1 ? "s" : "") itself alive: stop \(live == 1 ? "it" : "them") first.</p>"
        } else if let csrf, !done {
            let fingerprint = prepared.plan.map { "\($0.partition):\($0.target)" }.joined(separator: ",")
            body += """
                <form method="post" action="/stages/\(HTML.query(stage.stage))/reset" class="action">\
                \([("topic", topic), ("to", to), ("value", request["value"] ?? ""), ("csrf", csrf), ("plan", fingerprint)].map { "<input type=\"hidden\" name=\"\($0.0)\" value=\"\(HTML.text($0.1))\">" }.joined())\
                <button type="submit" id="execute-reset">Commit these offsets</button></form>
                """
        }
        return HTML.page(title: "Reset offsets", nav: "/stages", body: body)
    }

    /// The Find form and, for a query, every record found with its fate per stage.
    /// A value: its first 200 characters, and the whole of it one click away.
    static func valueView(_ value: [UInt8]?) -> String {
        guard let value else { return "(tombstone)" }
        let text = HTML.bytes(value).text
        guard text.count > 200 else { return HTML.text(text) }
        return "\(HTML.text(String(text.prefix(200))))… <details class=\"full-value\"><summary>the whole value (\(HTML.count(Int64(value.count))) bytes)</summary><pre>\(HTML.text(text))</pre></details>"
    }

    func find(topics: [String], request: [String: String], found: FoundMessages?, scanned: Int64, error: String?) -> String {
        let topic = request["topic"] ?? topics.first ?? ""
        let by = request["by"] ?? "key"
        let kinds = [("key", "key"), ("header", "header NAME=VALUE"), ("offset", "offset PARTITION:OFFSET"), ("time", "time (ISO-8601 or epoch ms)")]
        var body = """
            <h1>Find a message</h1>
            <form method="get" action="/find" class="filter">\
            <label>topic <select name="topic">\(topics.map { "<option\($0 == topic ? " selected" : "")>\(HTML.text($0))</option>" }.joined())</select></label>\
            <label>by <select name="by">\(kinds.map { "<option value=\"\($0.0)\"\($0.0 == by ? " selected" : "")>\(HTML.text($0.1))</option>" }.joined())</select></label>\
            <label>value <input name="value" value="\(HTML.text(request["value"] ?? ""))" size="40"></label>\
            <button type="submit" id="find">Find</button></form>
            <p class="muted">Read without joining any group. A key or header is looked for in the newest \(HTML.count(scanned)) records of each partition; \
            a time finds the first record at or after it in each partition.</p>
            """
        if let error { body += "<p class=\"error\">\(HTML.text(error))</p>" }
        guard let found else { return HTML.page(title: "Find a message", nav: "/find", body: body) }
        if found.matched > found.messages.count {
            body += "<p id=\"found\">\(HTML.count(Int64(found.matched))) found; the newest \(found.messages.count) are shown, newest first. Narrow the search (a key, a header, a time) to see the others.</p>"
        } else {
            body += "<p id=\"found\">\(found.matched) found\(found.matched > 1 ? ", newest first" : "").</p>"
        }
        for m in found.messages {
            let r = m.record
            let key = r.key.map { HTML.bytes($0).text } ?? "(none)"
            body += """
                <section class="found"><h2>\(HTML.text(r.topic)) partition \(r.partition) offset \(r.offset)</h2>\
                <dl><dt>written</dt><dd>\(HTML.text(HTML.time(r.timestamp)))</dd><dt>key</dt><dd class="key">\(HTML.text(key))</dd>\
                <dt>headers</dt><dd>\(HTML.text(r.headers.map { "\($0.key)=\($0.value.map { HTML.bytes($0).text } ?? "")" }.joined(separator: ", ")))</dd>\
                <dt>value</dt><dd class="key">\(Self.valueView(r.value))</dd></dl>\
                <table class="fate"><thead><tr><th>stage</th><th>group</th><th>committed</th><th>consumed</th></tr></thead><tbody>
                """
            for s in m.stages {
                body += "<tr data-stage=\"\(HTML.text(s.stage))\"><td>\(HTML.text(s.stage))</td><td>\(HTML.text(s.group))</td><td>\(HTML.count(s.committed))</td>"
                    + "<td class=\"consumed\">\(m.consumed(s.committed) ? "yes, committed past it" : "not yet")</td></tr>"
            }
            body += "</tbody></table>"
            if m.deadLetters.isEmpty {
                body += "<p class=\"muted\">Not in the dead letters.</p>"
            } else {
                for e in m.deadLetters {
                    let redrive = "/dead-letters?stage=\(HTML.query(e.letter.stage))&reason=\(HTML.query(e.letter.failure.reason.rawValue))&origin=\(HTML.query(r.topic))"
                    body += """
                        <p class="dead-letter">In the dead letters: <a href="/dead-letters/\(e.record.partition)/\(e.record.offset)">\(HTML.text(e.letter.stage)), \
                        \(HTML.text(e.letter.failure.reason.rawValue))</a> · <a href="\(HTML.text(redrive))">its group, to redrive</a></p>
                        """
                }
            }
            body += "</section>"
        }
        return HTML.page(title: "Find a message", nav: "/find", body: body)
    }

    /// Every worker as it reports itself, dead after `silence`, with the membership mismatches.
    func workers(_ roster: WorkerRoster, silence: Duration, now: Int64) -> String {
        var body = """
            <h1>Workers</h1>
            <p class="muted">Each worker reports every few seconds to the status topic; one silent for more than \(HTML.text(HTML.seconds(silence.asSeconds))) \
            is shown dead (a worker that stops gracefully removes itself). Joined with the groups' members where the broker lists them.</p>
            """
        if !roster.silentMembers.isEmpty {
            body += "<p class=\"warning\" id=\"silent-members\">Members that do not report: "
                + roster.silentMembers.keys.sorted().map { "\(HTML.text($0)): \(HTML.text(roster.silentMembers[$0]!.joined(separator: ", ")))" }.joined(separator: "; ") + "</p>"
        }
        body += """
            <table class="workers"><thead><tr><th>stage</th><th>host</th><th>pid</th><th>state</th><th>member</th><th>partitions</th><th>in flight</th>\
            <th>lag</th><th>in</th><th>RSS</th><th>CPU</th><th>last report</th><th>started</th><th>last error</th></tr></thead><tbody>
            """
        for row in roster.rows {
            let s = row.status
            let member = row.isMember.map { $0 ? "yes" : "NOT A MEMBER" } ?? "not listed by the broker"
            body += """
                <tr data-worker="\(HTML.text(s.key))"><td>\(HTML.text(s.stage))</td><td>\(HTML.text(s.host))</td><td>\(s.pid)</td>\
                <td class="state"><span class="status status-\(row.alive ? "OK" : "STOP")">\(row.alive ? "alive" : "dead")</span></td><td>\(HTML.text(member))</td>\
                <td>\(s.assignedPartitions)</td><td>\(HTML.count(Int64(s.inFlightRecords)))</td><td>\(HTML.count(s.lagRecords))</td><td>\(HTML.text(HTML.rate(s.inRate)))</td>\
                <td>\(s.rssBytes / 1_048_576) MiB</td><td>\(HTML.text(HTML.seconds(s.cpuSeconds)))</td>\
                <td>\(HTML.text(HTML.seconds(Double(now - s.reportedAt) / 1000))) ago</td><td>\(HTML.text(HTML.time(s.startedAt)))</td>\
                <td>\(HTML.text(s.lastError ?? ""))</td></tr>
                """
        }
        body += "</tbody></table>"
        if roster.rows.isEmpty { body += "<p class=\"muted\">No worker has reported yet.</p>" }
        return HTML.page(title: "Workers", nav: "/workers", body: body)
    }

    /// Bytes as they are; JSON also laid out (whitespace only: duplicate keys, the keys' order
    /// and numbers as written stay), with the exact bytes one click away; bytes that are not
    /// UTF-8 also as a hex dump.
    static func exactBlock(_ bytes: [UInt8]?) -> String {
        guard let bytes else { return "<p class=\"muted\">(none: a tombstone)</p>" }
        let (text, valid) = HTML.bytes(bytes)
        let size = "\(bytes.count) byte\(bytes.count == 1 ? "" : "s")"
        if valid, let laidOut = ExactView.laidOut(bytes), laidOut != text {
            return """
                <pre class="value">\(HTML.text(laidOut))</pre>\
                <details class="exact"><summary>exact bytes (\(size), as sent)</summary><pre class="value">\(HTML.text(text))</pre></details>
                """
        }
        guard valid else {
            return """
                <pre class="value">\(HTML.text(text))</pre><p class="warning">not valid UTF-8: invalid bytes shown as \u{FFFD}</p>\
                <details class="exact"><summary>exact bytes (\(size), hex)</summary><pre class="value">\(HTML.text(ExactView.hexDump(bytes)))</pre></details>
                """
        }
        return "<pre class=\"value\">\(HTML.text(text))</pre>"
    }

    /// One dead letter; `csrf` when the reader may act (a redrive of this one), `redrivenBy`
    /// the redrive that already sent it back.
    func deadLetter(_ e: DeadLetterEntry, csrf: String?, redrivenBy: RedriveRecord?) -> String {
        let l = e.letter
        var body = """
            <h1>Dead letter \(e.record.partition)/\(e.record.offset)</h1>
            <dl><dt>stage</dt><dd>\(HTML.text(l.stage))</dd><dt>reason</dt><dd>\(HTML.text(l.failure.reason.rawValue))</dd>\
            <dt>field</dt><dd>\(HTML.text(l.failure.field))</dd><dt>detail</dt><dd>\(HTML.text(l.failure.detail))</dd>\
            <dt>origin</dt><dd>\(HTML.text("\(l.origin.topic) partition \(l.origin.partition) offset \(l.origin.offset)"))</dd>\
            <dt>written</dt><dd>\(HTML.text(HTML.time(e.record.timestamp)))</dd><dt>attempts</dt><dd>\(l.attempts)</dd>\
            <dt>redriven</dt><dd>\(e.redriveCount) times</dd></dl>
            <h2>Key</h2>\(Self.exactBlock(l.key))<h2>Value</h2>\(Self.exactBlock(l.value))
            <h2>Headers</h2><table class="headers"><thead><tr><th>name</th><th>value</th></tr></thead><tbody>
            """
        for h in e.record.headers {
            let (value, valid) = h.value.map(HTML.bytes) ?? ("(null)", true)
            body += "<tr><td>\(HTML.text(h.key))</td><td>\(HTML.text(value))\(valid ? "" : " <span class=\"warning\">(not valid UTF-8)</span>")</td></tr>"
        }
        body += "</tbody></table>"
        if let redrivenBy {
            body += "<p class=\"muted\" id=\"redriven\">\(redrivenBy.markedHandled ? "Marked handled" : "Redriven") by \(HTML.text(redrivenBy.who)) at \(HTML.text(HTML.time(redrivenBy.time))).</p>"
        } else if let csrf {
            var one = DeadLetterSelection()
            one.letters = [DeadLetterSelection.address(e)]
            body += """
                <form method="post" action="/dead-letters/redrive/preview" class="action">\(Self.hidden(one, csrf: csrf))\
                <button type="submit" id="preview-redrive-one">Preview a redrive of this one</button> \
                <span class="muted">(nothing is sent before you confirm)</span></form>
                <form method="post" action="/dead-letters/handled" class="action">\(Self.hidden(one, csrf: csrf))\
                <button type="submit" id="mark-handled">Mark handled</button> \
                <span class="muted">(sends nothing; recorded with your name; later redrives leave it out)</span></form>
                """
        }
        let key = e.letter.key.map { String(decoding: $0, as: UTF8.self) }
        body += "<p><a href=\"/dead-letters\">all dead letters</a>"
            + (key.map { " · <a href=\"/dead-letters?key=\(HTML.query($0))\">dead letters of this key</a>" } ?? "") + "</p>"
        return HTML.page(title: "Dead letter", nav: "/dead-letters", body: body)
    }
}

import AsyncHTTPClient
import Foundation
import NIOCore
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import PipelineTesting
import Testing
@testable import Kafka
@testable import Operations
@testable import Pipeline

/// `pipelinectl console` in a real browser (headless Chromium from Debian, driven over
/// WebDriver) against the real local broker and a real worker process: every stage of the
/// topology on the overview, lag falling to 0, a stopped worker's stage turning STOP without a
/// reload, charts with points, the garbage inputs' dead letters grouped by reason and shown as
/// text (hostile keys, values and headers run no script), and every link answering 200.
/// Screenshots go to .build/console-screenshots/.
@Suite(.serialized, .timeLimit(.minutes(5))) struct ConsoleBrowserTests {
    static let root = DevCommandTests.root
    static let screenshots = root.appendingPathComponent(".build/console-screenshots").path

    static func json(_ url: String) async throws -> [String: Any] {
        let (data, _) = try await URLSession.shared.data(from: URL(string: url)!)
        return (try JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:]
    }

    /// Waits (polling, up to `timeout`) until `condition` holds.
    static func eventually(_ what: String, timeout: Duration = .seconds(90), _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(300))
        }
        throw WebDriverError(description: "timed out waiting until \(what)")
    }

    static func stageCells(_ port: Int, _ stage: String) async throws -> [String: String] {
        let stages = try await json("http://127.0.0.1:\(port)/api/stages")["stages"] as? [[String: Any]] ?? []
        return stages.first { $0["stage"] as? String == stage }?["cells"] as? [String: String] ?? [:]
    }

    @Test(.enabled(if: WebDriver.available, "needs chromium and chromium-driver (scripts/install-deps)"))
    func theConsoleShowsEveryStageTheDeadLettersAsTextAndAStoppedWorker() async throws {
        try await LocalBroker.with { broker in
            let bootstrap = broker.bootstrapServers
            let topologyPath = Self.root.appendingPathComponent("topology.yaml").path
            let topology = try Topology.load(path: topologyPath)
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [bootstrap]))
            _ = try await topology.apply(using: admin)
            await admin.close()

            // A prices-decode worker; 40 good ticks and 3 hostile garbage records.
            let worker = try WorkerProcessTests.startWorker("prices-decode", topology: topologyPath, bootstrap: bootstrap, extra: ["--status-interval", "1s"])
            defer { worker.kill() }
            let producer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
            var records = (0..<40).map { PriceTicks.tick($0) }
            for i in 0..<3 {
                var hostile = ProducerRecord(topic: "prices.raw", key: Array("<script>window.__xss=\(i)</script>".utf8),
                                             value: Array(#"<img src=x onerror="window.__xss=1"> "><b>not json</b> "#.utf8) + [0xFF, 0xFE, UInt8(i)])
                hostile.headers = [KafkaHeader(key: "x-note", string: "<script>window.__xss=3</script>"), KafkaHeader(key: "x-bytes", value: [0xC3, 0x28])]
                records.append(hostile)
            }
            let reports = try await producer.send(records)
            #expect(reports.allSatisfy { $0.error == nil })

            let console = try ManagedProcess.launch(
                try WorkerProcessTests.pipelinectl(),
                arguments: ["console", "--topology", topologyPath, "--listen", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0",
                            "--sample-interval", "1s", "--worker-silence", "4s", "--log-format", "json", "--bootstrap-server", bootstrap],
                environment: [:])
            defer { console.kill() }
            let port = try await IngestHTTPTests.loggedPort(console, "console listening")
            let base = "http://127.0.0.1:\(port)"
            // A second worker that will die without a word (SIGKILL).
            let doomed = try WorkerProcessTests.startWorker("prices-latest", topology: topologyPath, bootstrap: bootstrap, extra: ["--status-interval", "1s"])
            defer { doomed.kill() }
            let browser = try await WebDriver.start()

            do {
                // The overview lists every stage of the topology; prices-decode's lag falls to 0.
                try await Self.eventually("prices-decode caught up") {
                    let cells = try await Self.stageCells(port, "prices-decode")
                    return cells["lag"] == "0" && cells["verdict"] == "OK" && cells["partitions"] != "0"
                }
                try await browser.go(base + "/")
                let shown = try await browser.run("return Array.from(document.querySelectorAll('tr[data-stage]')).map(r => r.dataset.stage)") as? [String]
                #expect(Set(shown ?? []) == Set(topology.stages.map(\.name)), "\(shown ?? [])")
                #expect(shown?.count == topology.stages.count)
                try await browser.screenshot(to: Self.screenshots + "/overview.png")

                // Workers: both report themselves; the killed one turns dead after the silence.
                try await Self.eventually("both workers reporting") {
                    try await browser.go(base + "/workers")
                    let states = try await browser.run("return Array.from(document.querySelectorAll('tr[data-worker]')).map(r => r.cells[0].textContent + ' ' + r.querySelector('td.state').textContent)") as? [String] ?? []
                    return Set(states) == ["prices-decode alive", "prices-latest alive"]
                }
                #expect(try await Self.stageCells(port, "prices-decode")["members"] == "1", "the overview counts the live reporting worker")
                doomed.kill()
                _ = await doomed.waitForExit()
                try await Self.eventually("the killed worker shown dead") {
                    try await browser.go(base + "/workers")
                    let states = try await browser.run("return Array.from(document.querySelectorAll('tr[data-worker]')).map(r => r.cells[0].textContent + ' ' + r.querySelector('td.state').textContent)") as? [String] ?? []
                    return Set(states) == ["prices-decode alive", "prices-latest dead"]
                }
                try await browser.screenshot(to: Self.screenshots + "/workers.png")

                // Dead letters: the three garbage records, grouped by reason, shown as text.
                try await Self.eventually("three dead letters listed") {
                    try await browser.go(base + "/dead-letters")
                    let count = try await browser.run("""
                        return Array.from(document.querySelectorAll('table.groups tbody tr')).filter(r => r.cells[0].textContent === 'prices-decode')
                          .reduce((n, r) => n + Number(r.querySelector('td.count').textContent), 0)
                        """) as? Int
                    return count == 3
                }
                try await browser.go(base + "/dead-letters?stage=prices-decode")
                let reasons = try await browser.run("return Array.from(document.querySelectorAll('tr[data-reason]')).map(r => r.dataset.reason)") as? [String]
                #expect(reasons == ["wrong-type"], "one group: the decoder reads the three as not a JSON object: \(reasons ?? [])")
                try await browser.screenshot(to: Self.screenshots + "/dead-letters.png")
                let opened = try await browser.run("return Array.from(document.querySelectorAll('table.letters a')).map(a => a.href)") as? [String] ?? []
                #expect(opened.count == 3)
                for link in opened {
                    try await browser.go(link)
                    let page = try await browser.run("""
                        return { xss: typeof window.__xss, images: document.images.length, scripts: document.scripts.length,
                                 pre: Array.from(document.querySelectorAll('pre.value')).map(p => p.textContent).join('|'),
                                 headers: document.querySelector('table.headers').textContent,
                                 warning: document.querySelectorAll('.warning').length }
                        """) as? [String: Any] ?? [:]
                    #expect(page["xss"] as? String == "undefined", "no injected script ran: \(page)")
                    #expect(page["images"] as? Int == 0, "no injected <img>")
                    #expect(page["scripts"] as? Int == 1, "only the console's own script")
                    #expect((page["pre"] as? String ?? "").contains("<script>window.__xss="), "the key shown as text")
                    #expect((page["pre"] as? String ?? "").contains(#"<img src=x onerror="window.__xss=1"> "><b>"#), "the value shown as text")
                    #expect((page["headers"] as? String ?? "").contains("<script>window.__xss=3</script>"))
                    #expect((page["warning"] as? Int ?? 0) >= 2, "invalid UTF-8 in the value and a header is marked")
                }
                try await browser.screenshot(to: Self.screenshots + "/dead-letter.png")

                // A redrive: the group's selection, a preview (nothing sent yet), then the redrive.
                try await browser.go(base + "/dead-letters?stage=prices-decode&reason=wrong-type")
                _ = try await browser.run("document.getElementById('preview-redrive').click()")
                try await Self.eventually("the preview") {
                    try await browser.run("var c = document.getElementById('redrive-count'); return c ? c.textContent : null") as? String == "3"
                }
                let destinations = try await browser.run("return Array.from(document.querySelectorAll('table.destinations tbody tr')).map(r => r.textContent)") as? [String] ?? []
                #expect(!destinations.isEmpty && destinations.allSatisfy { $0.hasPrefix("prices.raw") }, "\(destinations)")
                #expect((try await browser.run("return document.body.textContent") as? String ?? "").contains("pipelinectl dlq redrive --stage 'prices-decode' --reason 'wrong-type' --max-redrives 3 --execute"))
                try await browser.screenshot(to: Self.screenshots + "/redrive-preview.png")
                let before = try await OperatorCommandTests.readAll("prices.raw", bootstrap: bootstrap).filter { $0.headers.contains { $0.key == "dead-letter.redriven" } }
                #expect(before.isEmpty, "a preview sends nothing")
                _ = try await browser.run("document.getElementById('execute-redrive').click()")
                try await Self.eventually("the redrive") {
                    try await browser.run("var c = document.getElementById('redriven'); return c ? c.textContent : null") as? String == "3"
                }
                let redriven = try await OperatorCommandTests.readAll("prices.raw", bootstrap: bootstrap).filter {
                    $0.headers.contains { $0.key == "dead-letter.redriven" && $0.value == Array("1".utf8) }
                }
                #expect(redriven.count == 3, "exactly the three, once each: \(redriven.count)")
                #expect(Set(redriven.compactMap(\.key)) == Set((0..<3).map { Array("<script>window.__xss=\($0)</script>".utf8) }))
                try await browser.go(base + "/redrives")
                let logged = try await browser.run("return Array.from(document.querySelectorAll('table.redrives tbody tr')).map(r => r.cells[2].textContent + ' ' + r.cells[4].textContent)") as? [String]
                #expect(logged == ["redrive 3"], "the redrive log lists it (what, sent): \(logged ?? [])")

                // Find the first hostile record by its key: where it sits, that prices-decode
                // committed past it (and the other stages reading prices.raw did not), and its dead letter.
                try await browser.go(base + "/find?topic=prices.raw&by=key&value=" + "<script>window.__xss=0</script>".addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)
                let found = try await browser.run("""
                    return { found: document.getElementById('found').textContent, key: document.querySelector('dd.key').textContent,
                             decode: document.querySelector('tr[data-stage="prices-decode"] td.consumed').textContent,
                             candles: document.querySelector('tr[data-stage="prices-candles"] td.consumed').textContent,
                             deadLetter: document.querySelectorAll('p.dead-letter').length, xss: typeof window.__xss }
                    """) as? [String: Any] ?? [:]
                #expect(found["found"] as? String == "2 found, newest first.", "the original and its redriven copy: \(found)")
                #expect(found["key"] as? String == "<script>window.__xss=0</script>")
                #expect(found["decode"] as? String == "yes, committed past it")
                #expect(found["candles"] as? String == "not yet", "no prices-candles worker ran")
                #expect((found["deadLetter"] as? Int ?? 0) >= 1 && found["xss"] as? String == "undefined", "\(found)")
                try await browser.screenshot(to: Self.screenshots + "/find.png")

                let log = try await browser.consoleLog()
                #expect(log.filter { $0.level == "SEVERE" }.isEmpty, "no errors (a blocked inline script would log one): \(log)")

                // Every link on every page answers 200.
                var seen: Set<String> = [base + "/"]
                var queue = [base + "/"]
                while let page = queue.popLast() {
                    try await browser.go(page)
                    let links = try await browser.run("return Array.from(document.querySelectorAll('a[href]')).map(a => a.href)") as? [String] ?? []
                    for link in links where link.hasPrefix(base) && !seen.contains(link) && seen.count < 150 {
                        seen.insert(link)
                        if !link.contains("/dead-letters/") { queue.append(link) }
                    }
                }
                for link in seen.sorted() {
                    let (_, response) = try await URLSession.shared.data(from: URL(string: link)!)
                    #expect((response as? HTTPURLResponse)?.statusCode == 200, "\(link)")
                }
                #expect(seen.count > topology.stages.count, "the crawler saw the stage pages and more: \(seen.count)")

                // The stage page's charts have points.
                try await browser.go(base + "/stages/prices-decode")
                try await Self.eventually("a chart with points") {
                    try await browser.go(base + "/stages/prices-decode")
                    return (try await browser.run("return Number(document.querySelector('figure.chart svg').dataset.points)") as? Int ?? 0) >= 2
                }
                // It lists its live worker, and the charts of what the workers report (outputs,
                // dead letters, errors, latency) have points, with labelled axes. (New ticks:
                // latency is reported for the intervals in which inputs were settled.)
                var next = 60
                try await Self.eventually("the workers' charts with points") {
                    _ = try await producer.send((next..<next + 5).map { PriceTicks.tick($0) })
                    next += 5
                    try await browser.go(base + "/stages/prices-decode")
                    let charts = try await browser.run("""
                        return Array.from(document.querySelectorAll('figure.chart')).map(f => {
                          const svg = f.querySelector('svg'); const t = f.querySelector('text.y-title');
                          return (t ? t.textContent : '-') + '=' + (svg ? svg.dataset.points : 0); })
                        """) as? [String] ?? []
                    return charts.count == 7 && charts.allSatisfy { !$0.hasSuffix("=0") && !$0.hasPrefix("-") }
                }
                let stageWorkers = try await browser.run("return Array.from(document.querySelectorAll('tr[data-worker]')).map(r => r.querySelector('td.state').textContent)") as? [String]
                #expect(stageWorkers == ["alive"], "its one worker: \(stageWorkers ?? [])")
                #expect(try await browser.run("return document.getElementById('stage-dead-letters').textContent") as? String ?? "" != "None.", "its dead letters")
                try await browser.screenshot(to: Self.screenshots + "/stage.png")

                // A topic's live tail, left open: records produced afterwards appear at the top,
                // a hostile one as text.
                try await browser.go(base + "/topics/prices.ticks?tail=on")
                let tailProducer = try KafkaProducer(configuration: ProducerConfiguration(bootstrapServers: [bootstrap]))
                #expect(try await tailProducer.send([
                    ProducerRecord(topic: "prices.ticks", partition: 0, key: Array("tail-1".utf8), value: Array("<img src=x onerror=\"window.__xss=9\">".utf8)),
                    ProducerRecord(topic: "prices.ticks", partition: 0, key: Array("tail-2".utf8), value: Array("plain".utf8)),
                ]).allSatisfy { $0.error == nil })
                await tailProducer.close()
                try await Self.eventually("the tail shows both") {
                    let keys = try await browser.run("return Array.from(document.querySelectorAll('tr.arrived')).map(r => r.cells[3].textContent)") as? [String] ?? []
                    return Set(keys).isSuperset(of: ["tail-1", "tail-2"])
                }
                let tailPage = try await browser.run("""
                    return { xss: typeof window.__xss, images: document.images.length,
                             values: Array.from(document.querySelectorAll('tr.arrived')).map(r => r.cells[4].textContent) }
                    """) as? [String: Any] ?? [:]
                #expect(tailPage["xss"] as? String == "undefined" && tailPage["images"] as? Int == 0, "\(tailPage)")
                #expect((tailPage["values"] as? [String] ?? []).contains("<img src=x onerror=\"window.__xss=9\">"), "shown as text: \(tailPage)")
                try await browser.screenshot(to: Self.screenshots + "/topic-tail.png")

                // The worker stops (it leaves the group); new ticks wait: the overview, left
                // open, turns prices-decode to STOP by itself.
                try await browser.go(base + "/")
                worker.terminate()
                #expect(await worker.waitForExit() == 0)
                _ = try await producer.send((100..<110).map { PriceTicks.tick($0) })
                var rowText = ""
                do {
                    try await Self.eventually("prices-decode STOP on the open page") {
                        rowText = try await browser.run("return document.querySelector('tr[data-stage=\"prices-decode\"]').textContent") as? String ?? ""
                        return try await browser.run("return document.querySelector('tr[data-stage=\"prices-decode\"] [data-field=\"verdict\"]').textContent") as? String == "STOP"
                    }
                } catch {
                    Issue.record("the row showed: \(rowText)")
                    throw error
                }
                let reason = try await browser.run("return document.querySelector('tr[data-stage=\"prices-decode\"] [data-field=\"reason\"]').textContent") as? String
                #expect(reason?.contains("no member consumes") == true && reason?.contains("behind") == true, "\(reason ?? "")")
                #expect(try await browser.run("return document.querySelector('tr[data-stage]').dataset.stage") as? String != nil)
                try await browser.screenshot(to: Self.screenshots + "/overview-stop.png")
                // A worker that stopped gracefully removed itself from the status topic.
                try await Self.eventually("the stopped worker gone from Workers") {
                    try await browser.go(base + "/workers")
                    let stages = try await browser.run("return Array.from(document.querySelectorAll('tr[data-worker]')).map(r => r.cells[0].textContent)") as? [String] ?? []
                    return stages == ["prices-latest"]
                }

                // A reset to the earliest offsets: the diff first (every record the group read, to
                // be read again), then the commit; the group's offsets are then 0.
                let kafka = KafkaConfiguration(bootstrapServers: [bootstrap])
                let groupAdmin = try KafkaAdmin(configuration: kafka)
                let partitions = try await groupAdmin.partitions(of: "prices.raw")
                let committedBefore = try await groupAdmin.committedOffsets(group: "prices-decode", partitions: partitions)
                let read = committedBefore.reduce(Int64(0)) { $0 + max(0, $1.offset) }
                try await browser.go(base + "/stages/prices-decode")
                _ = try await browser.run("Array.from(document.querySelectorAll('a')).find(a => a.textContent.startsWith('Reset offsets')).click()")
                try await Self.eventually("the reset form") { try await browser.run("return !!document.getElementById('show-diff')") as? Bool == true }
                _ = try await browser.run("document.getElementById('show-diff').click()")
                try await Self.eventually("the diff") { try await browser.run("var r = document.getElementById('reread'); return r ? r.textContent : null") as? String == String(read) }
                #expect((try await browser.run("return document.body.textContent") as? String ?? "").contains("pipelinectl groups reset-offsets prices-decode --topic prices.raw --to-earliest --execute"))
                try await browser.screenshot(to: Self.screenshots + "/reset-diff.png")
                #expect(try await groupAdmin.committedOffsets(group: "prices-decode", partitions: partitions) == committedBefore, "the diff commits nothing")
                _ = try await browser.run("document.getElementById('execute-reset').click()")
                try await Self.eventually("the reset") { try await browser.run("return !!document.getElementById('reset-done')") as? Bool == true }
                let after = try await groupAdmin.committedOffsets(group: "prices-decode", partitions: partitions)
                await groupAdmin.close()
                #expect(after.allSatisfy { $0.offset == 0 } && after.count == committedBefore.count, "\(after)")
            } catch {
                await browser.quit()
                await producer.close()
                throw error
            }
            await browser.quit()
            await producer.close()
        }
    }

    /// Beyond loopback the console refuses to start without a token; with one, pages without it
    /// go to /login, the API answers 401, a bearer token or the cookie /login sets gets in.
    @Test func beyondLoopbackTheConsoleNeedsItsToken() async throws {
        let refused = try ManagedProcess.launch(
            try WorkerProcessTests.pipelinectl(), arguments: ["console", "--listen", "0.0.0.0:0", "--bootstrap-server", "127.0.0.1:1"],
            environment: [:])
        #expect(await refused.waitForExit() != 0)
        #expect(refused.output().contains("give tokens with --tokens-file, --token-file or PIPELINE_CONSOLE_TOKEN"), "\(refused.output())")

        let token = "console-token-0123456789"
        let console = try ManagedProcess.launch(
            try WorkerProcessTests.pipelinectl(),
            arguments: ["console", "--topology", Self.root.appendingPathComponent("topology.yaml").path, "--listen", "0.0.0.0:0",
                        "--metrics-address", "127.0.0.1:0", "--log-format", "json", "--bootstrap-server", "127.0.0.1:1"],
            environment: ["PIPELINE_CONSOLE_TOKEN": token])
        defer { console.kill() }
        let port = try await IngestHTTPTests.loggedPort(console, "console listening")
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
        func get(_ path: String, headers: [(String, String)] = []) async throws -> (Int, [String: String], String) {
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
            for (name, value) in headers { request.headers.add(name: name, value: value) }
            let response = try await client.execute(request, timeout: .seconds(30))
            let body = String(buffer: try await response.body.collect(upTo: 1 << 22))
            return (Int(response.status.code), Dictionary(response.headers.map { ($0.name.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a }), body)
        }
        do {
            let page = try await get("/")
            #expect(page.0 == 303 && page.1["location"] == "/login", "\(page.0) \(page.1)")
            #expect(page.1["content-security-policy"]?.contains("script-src 'self'") == true)
            #expect(try await get("/api/stages").0 == 401)
            #expect(try await get("/api/stages", headers: [("Authorization", "Bearer wrong-token-0123456789")]).0 == 401)
            #expect(try await get("/api/stages", headers: [("Authorization", "Bearer \(token)")]).0 == 200)
            #expect(try await get("/static/console.css").0 == 200, "the sign-in page's style needs no token")
            var login = HTTPClientRequest(url: "http://127.0.0.1:\(port)/login")
            login.method = .POST
            login.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            login.body = .bytes(ByteBuffer(string: "token=wrong"))
            #expect(try await client.execute(login, timeout: .seconds(30)).status.code == 401)
            login.body = .bytes(ByteBuffer(string: "token=\(token)"))
            let signedIn = try await client.execute(login, timeout: .seconds(30))
            #expect(signedIn.status.code == 303)
            let cookie = try #require(signedIn.headers.first(name: "Set-Cookie"))
            #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && !cookie.contains(token))
            let pair = String(cookie.split(separator: ";")[0])
            let inside = try await get("/", headers: [("Cookie", pair)])
            #expect(inside.0 == 200 && inside.2.contains("<h1>Stages</h1>"))
            // A redrive form posted without the page's CSRF token (another site's form) is refused.
            var forged = HTTPClientRequest(url: "http://127.0.0.1:\(port)/dead-letters/redrive")
            forged.method = .POST
            forged.headers.add(name: "Cookie", value: pair)
            forged.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            forged.body = .bytes(ByteBuffer(string: "stage=prices-decode&expected=3"))
            let refused = try await client.execute(forged, timeout: .seconds(30))
            #expect(refused.status.code == 403)
            #expect(String(buffer: try await refused.body.collect(upTo: 1 << 20)).contains("CSRF token missing or stale"))
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
    }

    /// The lag history is saved to the console's compacted topic and read back by the next
    /// console: a chart has its points right after a restart.
    @Test func theHistorySurvivesARestart() async throws {
        try await LocalBroker.with { broker in
            let topologyPath = Self.root.appendingPathComponent("topology.yaml").path
            let admin = try KafkaAdmin(configuration: KafkaConfiguration(bootstrapServers: [broker.bootstrapServers]))
            _ = try await Topology.load(path: topologyPath).apply(using: admin)
            await admin.close()
            func start() async throws -> (ManagedProcess.Handle, Int) {
                let console = try ManagedProcess.launch(
                    try WorkerProcessTests.pipelinectl(),
                    arguments: ["console", "--topology", topologyPath, "--listen", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0",
                                "--sample-interval", "1s", "--history-save-interval", "1s", "--log-format", "json", "--bootstrap-server", broker.bootstrapServers],
                    environment: [:])
                return (console, try await IngestHTTPTests.loggedPort(console, "console listening"))
            }
            func points(_ port: Int) async throws -> Int {
                let (data, _) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)/stages/prices-decode")!)
                let page = String(decoding: data, as: UTF8.self)
                guard let range = page.range(of: #"data-points=""#) else { return 0 }
                return Int(page[range.upperBound...].prefix { $0.isNumber }) ?? 0
            }
            let (first, port) = try await start()
            defer { first.kill() }
            try await Self.eventually("three points of history") { try await points(port) >= 3 }
            let before = try await points(port)
            first.terminate()
            #expect(await first.waitForExit() == 0, "\(first.recentOutput())")

            let (second, again) = try await start()
            defer { second.kill() }
            try await second.waitForLine(containing: "history restored", timeout: .seconds(60))
            #expect(!second.output().contains(#""series":"0""#), "\(second.output())")
            let after = try await points(again)
            #expect(after >= before, "the chart kept its \(before) points across the restart (now \(after))")
            second.terminate()
            _ = await second.waitForExit()
        }
    }
}

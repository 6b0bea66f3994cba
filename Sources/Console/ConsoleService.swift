import Foundation
import HTTPServing
import HTTPTypes
import Hummingbird
import Kafka
import Logging
import NIOCore
import Operations
import Pipeline
import ServiceLifecycle
import Synchronization

/// Settings of `pipelinectl console`.
public struct ConsoleSettings: Sendable {
    public var host = "127.0.0.1"
    public var port = 8090
    /// Tokens and their owners' roles, required when `host` is not a loopback address: every
    /// request then carries one, as `Authorization: Bearer …` or the session cookie `/login` sets.
    public var access = ConsoleAccess.open
    /// How long a session `/login` starts lasts.
    public var sessionLifetime: Duration = .seconds(12 * 3600)
    /// A connection that sends nothing for this long (between requests, or within one) is closed.
    public var idleTimeout: Duration = .seconds(15)
    /// The newest dead letters read per partition of each dead-letter topic.
    public var deadLettersPerPartition: Int64 = 10_000
    /// No actions: the redrive forms are not shown and their POSTs are refused.
    public var readOnly = false
    /// A dead letter redriven this many times already is left.
    public var maxRedrives = 3
    /// The redrive log (created if missing).
    public var auditTopic = "pipeline.console.redrives"
    /// A worker silent for this long is shown dead.
    public var workerSilence: Duration = .seconds(30)
    /// Names (besides localhost, the loopback addresses and the address listened on) that
    /// requests may carry in `Host`: the console's names behind a proxy or in DNS.
    public var allowedHosts: [String] = []

    public init() {}

    /// Whether `host` only accepts connections from this machine.
    public static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
    }
}

/// The operator console: server-rendered pages over the sampler's state and the dead letters,
/// thin over `Operations` (the code `pipelinectl lag` and `dlq` use).
///
/// Every answer carries a strict Content-Security-Policy (scripts and styles from the console
/// itself only, no inline code, no frames, no other origins), `nosniff`, `Referrer-Policy:
/// same-origin` and `no-store`. Every request passes ``Guarded`` first: its `Host` must be one of the console's
/// names (DNS rebinding), a state change must come from the console's own pages (Origin,
/// Sec-Fetch-Site) and carry the form's CSRF token, and, with a token, the token. Every number a
/// request carries is checked against its range (``NumberBounds``) before any arithmetic: 400.
public final class ConsoleService: Service, Sendable {
    public let settings: ConsoleSettings
    let state: ConsoleState
    let pages: ConsolePages
    let deadLetterReader: DeadLetterReader
    let deadLetterTopics: [String]
    let redriveLog: RedriveLog
    /// Sends redrives and writes the redrive log; nil with --read-only.
    /// The redrives' and the audit log's producer, replaced when it cannot deliver any more.
    let producers: ProducerSlot?
    /// The token every form carries (a POST without it is refused): random per process.
    let csrf: String
    let sessions: Sessions
    let kafka: KafkaConfiguration
    let logger: Logger
    /// The port of each start of the server (port 0 picks a free one).
    public let listening: AsyncStream<Int>
    private let listened: AsyncStream<Int>.Continuation
    private let cache = Mutex<(at: ContinuousClock.Instant, entries: [DeadLetterEntry], redrives: [RedriveRecord])?>(nil)
    /// One action at a time (a redrive, a dead letter marked handled): each reads the dead letters
    /// and the redrive log, checks its form against them and appends to the log, so a second
    /// action sees the first one's record (two identical redrive posts send the records once; the
    /// second gets 409).
    private let actions = AsyncGate(limit: 1)
    /// Each stage's inputs and outputs, by name: where a redrive may send its dead letters.
    private let stageTopics: [String: Set<String>]

    public init(settings: ConsoleSettings, state: ConsoleState, kafka: KafkaConfiguration, logger: Logger) throws {
        self.settings = settings
        self.sessions = Sessions(lifetime: settings.sessionLifetime)
        self.state = state
        self.pages = ConsolePages(state: state)
        self.deadLetterTopics = Array(Set(state.topology.stages.map(\.deadLetterTopic))).sorted()
        self.stageTopics = Dictionary(state.topology.stages.map { ($0.name, Set($0.inputs).union($0.outputs.values)) }, uniquingKeysWith: { $0.union($1) })
        self.deadLetterReader = DeadLetterReader(kafka: kafka, topics: deadLetterTopics, maxPerPartition: settings.deadLettersPerPartition)
        self.redriveLog = RedriveLog(topic: settings.auditTopic, kafka: kafka)
        if settings.readOnly {
            producers = nil
        } else {
            var configuration = ProducerConfiguration(kafka: kafka)
            configuration.acks = .all
            configuration.idempotence = true
            producers = try ProducerSlot(logger: logger) { [configuration, logger] in try KafkaProducer(configuration: configuration, logger: logger) }
        }
        csrf = (0..<4).map { _ in String(UInt64.random(in: .min ... .max), radix: 16) }.joined()
        self.kafka = kafka
        self.logger = logger
        (listening, listened) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    static let securityHeaders: HTTPFields = [
        .contentSecurityPolicy: "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        HTTPField.Name("X-Content-Type-Options")!: "nosniff",
        // Not no-referrer: under it a browser sends `Origin: null` with the console's own form
        // posts (Fetch, "serializing a request origin"), and Guarded refuses a null Origin.
        // same-origin still sends nothing to another site.
        HTTPField.Name("Referrer-Policy")!: "same-origin",
        HTTPField.Name("X-Frame-Options")!: "DENY",
        .cacheControl: "no-store",
    ]

    public func run() async throws {
        let router = Router()
        router.get("/") { _, _ in self.html(self.pages.overview(now: Self.now())) }
        router.get("/stages/:name") { request, context in
            let tier = try Self.query(request)["tier"].map { try RequestParameters.number($0, name: "tier", 0...Int64(LagHistory.tiers.count - 1), what: "a tier") }
            return await self.stagePage(context.parameters.get("name") ?? "", tier: Int(tier ?? 0))
        }
        router.get("/dead-letters") { request, _ in await self.deadLettersPage(try Self.query(request)) }
        router.get("/dead-letters/:partition/:offset") { _, context in
            try await self.deadLetterPage(context.parameters.get("partition") ?? "", context.parameters.get("offset") ?? "")
        }
        router.get("/api/stages") { _, _ in self.stagesJSON() }
        router.get("/redrives") { _, _ in await self.redrivesPage() }
        router.get("/find") { request, _ in await self.findPage(try Self.query(request)) }
        router.get("/topics") { _, _ in await self.topicsPage() }
        router.get("/topics/:name") { request, context in
            await self.topicPage(try RequestParameters.path(context.parameters.get("name") ?? "", name: "topic"), try Self.query(request))
        }
        router.get("/topics/:name/:partition/:offset") { _, context in
            try await self.recordPage(
                try RequestParameters.path(context.parameters.get("name") ?? "", name: "topic"),
                context.parameters.get("partition") ?? "", context.parameters.get("offset") ?? "")
        }
        router.get("/api/topics/:name/tail") { request, context in
            try await self.tailJSON(try RequestParameters.path(context.parameters.get("name") ?? "", name: "topic"), try Self.query(request))
        }
        router.get("/workers") { _, _ in self.html(self.pages.workers(self.state.roster, silence: self.settings.workerSilence, now: Self.now())) }
        router.get("/stages/:name/reset") { request, context in await self.resetPage(context.parameters.get("name") ?? "", try Self.query(request), execute: false) }
        router.post("/stages/:name/reset") { request, context in
            let form = try await Self.form(request)
            guard self.mayAct, ConstantTime.equal(Array((form["csrf"] ?? "").utf8), Array(self.csrf.utf8)) else { return self.refused() }
            return await self.resetPage(context.parameters.get("name") ?? "", form, execute: true)
        }
        router.post("/dead-letters/redrive/preview") { request, _ in try await self.redrive(request, execute: false) }
        router.post("/dead-letters/redrive") { request, _ in try await self.redrive(request, execute: true) }
        router.post("/dead-letters/handled") { request, _ in try await self.markHandled(request) }
        router.get("/static/console.css") { _, _ in Self.asset(Assets.css, type: "text/css; charset=utf-8") }
        router.get("/static/console.js") { _, _ in Self.asset(Assets.js, type: "text/javascript; charset=utf-8") }
        router.get("/login") { _, _ in self.html(Self.loginPage(failed: false)) }
        router.post("/login") { request, _ in try await self.login(request) }
        router.post("/logout") { request, _ in self.logout(request) }
        router.get("/healthz") { _, _ in Self.plain(200, "ok\n") }
        router.get("/favicon.ico") { _, _ in Response(status: .noContent, headers: Self.securityHeaders) }

        if !settings.readOnly {
            do { try await redriveLog.ensure() } catch { logger.warning("cannot create the redrive log \(settings.auditTopic): \(error)") }
        }
        let responder = router.buildResponder()
        let guarded = Guarded(inner: responder, access: settings.access, sessions: sessions, hosts: HostPolicy(listening: settings.host, allowed: settings.allowedHosts))
        let app = Application(
            responder: guarded,
            // A refused request's connection is closed once it is answered; one that says nothing
            // for `idleTimeout` (between requests, or in the middle of one) is closed too.
            server: HTTP1Server.builder(idleTimeout: settings.idleTimeout, additionalChannelHandlers: { [CloseAfterRefusal()] }),
            configuration: ApplicationConfiguration(address: .hostname(settings.host, port: settings.port), serverName: nil),
            onServerRunning: { [self] channel in
                let port = channel.localAddress?.port ?? settings.port
                listened.yield(port)
                logger.info("console listening on http://\(settings.host):\(port)/", metadata: ["port": "\(port)"])
            },
            logger: logger)
        try await app.run()
        await producers?.close(deadline: .seconds(10))
    }

    // MARK: Pages

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// The query's parameters; one that cannot be read is refused with its name (a dropped
    /// filter would select everything).
    static func query(_ request: Request) throws(BadParameter) -> [String: String] {
        try RequestParameters.decode(request.uri.query ?? "")
    }

    func stagePage(_ name: String, tier: Int) async -> Response {
        guard state.row(name) != nil else {
            return html(HTML.page(title: "Not found", nav: "", body: "<h1>No stage \(HTML.text(name))</h1><p><a href=\"/\">stages</a></p>"), status: 404)
        }
        let (entries, _, error) = await entries()
        guard let page = pages.stage(name, tier: tier, now: Self.now(), deadLetters: entries, deadLetterError: error) else {
            return html(HTML.page(title: "Not found", nav: "", body: "<h1>No stage \(HTML.text(name))</h1><p><a href=\"/\">stages</a></p>"), status: 404)
        }
        return html(page)
    }

    /// The dead letters and the redrive log, read again at most every 5 s (`fresh`: now).
    func entries(fresh: Bool = false) async -> (entries: [DeadLetterEntry], redrives: [RedriveRecord], error: String?) {
        if !fresh, let cached = cache.withLock({ $0 }), ContinuousClock.now - cached.at < .seconds(5) { return (cached.entries, cached.redrives, nil) }
        do {
            let entries = try await deadLetterReader.read()
            let redrives = settings.readOnly ? [] : try await redriveLog.read()
            cache.withLock { $0 = (ContinuousClock.now, entries, redrives) }
            return (entries, redrives, nil)
        } catch {
            logger.warning("cannot read the dead letters", metadata: ["error": "\(error)"])
            let cached = cache.withLock { $0 }
            return (cached?.entries ?? [], cached?.redrives ?? [], "\(error)")
        }
    }

    func deadLettersPage(_ query: [String: String]) async -> Response {
        let (entries, redrives, error) = await entries()
        let filter: DeadLetterSelection
        do throws(BadParameter) {
            filter = DeadLetterSelection(query: try DeadLetterSelection.withTimesChecked(query))
        } catch {
            return Self.badRequest(error)
        }
        return html(pages.deadLetters(entries, filter: filter, redrives: redrives,
                                      actions: mayAct ? csrf : nil, readError: error))
    }

    func findPage(_ query: [String: String]) async -> Response {
        let topics = Array(Set(state.topology.stages.flatMap(\.inputs))).sorted()
        let finder = MessageFinder(kafka: kafka)
        guard let by = query["by"], let value = query["value"], let topic = query["topic"] else {
            return html(pages.find(topics: topics, request: query, found: nil, scanned: finder.scanPerPartition, error: nil))
        }
        guard topics.contains(topic) else {
            return html(pages.find(topics: topics, request: query, found: nil, scanned: finder.scanPerPartition, error: "\(topic) is not an input of any stage"), status: 400)
        }
        do {
            let search = try MessageQuery(by: by, value: value)
            let stages = state.topology.stages.filter { $0.inputs.contains(topic) }.map { ($0.name, $0.group) }
            let (deadLetters, _, _) = await entries()
            let found = try await finder.find(search, topic: topic, stages: stages, deadLetters: deadLetters)
            return html(pages.find(topics: topics, request: query, found: found, scanned: finder.scanPerPartition, error: nil))
        } catch let error as MessageQueryError {
            return html(pages.find(topics: topics, request: query, found: nil, scanned: finder.scanPerPartition, error: error.reason), status: 400)
        } catch {
            return html(pages.find(topics: topics, request: query, found: nil, scanned: finder.scanPerPartition, error: "\(error)"), status: 503)
        }
    }

    // MARK: Topics

    func topicsPage() async -> Response {
        do {
            let admin = try KafkaAdmin(configuration: kafka, timeout: .seconds(10))
            let topics: [TopicDescription]
            do {
                topics = try await admin.listTopics(withConfig: false)
            } catch {
                await admin.close()
                throw error
            }
            await admin.close()
            return html(pages.topics(topics, error: nil))
        } catch {
            return html(pages.topics([], error: "\(error)"), status: 503)
        }
    }

    func topicPage(_ topic: String, _ query: [String: String]) async -> Response {
        let browser = TopicBrowser(kafka: kafka)
        let filter: TopicFilter
        do throws(BadParameter) {
            filter = try TopicFilter(query: query)
            if let tail = query["tail"], !["", "on"].contains(tail) { throw BadParameter(name: "tail", reason: "'\(tail)' is not on or empty") }
        } catch {
            return Self.badRequest(error)
        }
        let tail = query["tail"] == "on"
        do {
            let browsed = try await browser.newest(topic, filter: filter)
            return html(pages.topic(topic, filter: filter, browsed: browsed, scanPerPartition: browser.scanPerPartition, tail: tail, error: nil))
        } catch is TopicBrowser.NoSuchTopic {
            return html(notFound("no topic \(topic)"), status: 404)
        } catch {
            return html(pages.topic(topic, filter: filter, browsed: nil, scanPerPartition: browser.scanPerPartition, tail: tail, error: "\(error)"), status: 503)
        }
    }

    func recordPage(_ topic: String, _ partition: String, _ offset: String) async throws -> Response {
        let p = Int32(try RequestParameters.number(try RequestParameters.path(partition, name: "partition"), name: "partition", NumberBounds.partition, what: "a partition"))
        let o = try RequestParameters.number(try RequestParameters.path(offset, name: "offset"), name: "offset", NumberBounds.offset, what: "an offset")
        do {
            guard let record = try await TopicBrowser(kafka: kafka).record(topic, partition: p, offset: o) else {
                return html(notFound("no record in \(topic) at partition \(p), offset \(o)"), status: 404)
            }
            return html(pages.record(record, topic: topic))
        } catch is TopicBrowser.NoSuchTopic {
            return html(notFound("no topic \(topic)"), status: 404)
        } catch {
            return html(notFound("cannot read \(topic): \(error)"), status: 503)
        }
    }

    /// The live tail's next records (JSON; the script adds them as text).
    func tailJSON(_ topic: String, _ query: [String: String]) async throws -> Response {
        let filter = try TopicFilter(query: query)
        let position = try TailPosition(text: query["after"] ?? "")
        var fields = Self.securityHeaders
        fields[.contentType] = "application/json"
        do {
            let browsed = try await TopicBrowser(kafka: kafka).tail(topic, after: position, filter: filter)
            let body = TailJSON(records: browsed.records.map { ConsolePages.tailRecord($0, topic: topic) }, after: browsed.after.text)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            return Response(status: .ok, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: try encoder.encode(body))))
        } catch is TopicBrowser.NoSuchTopic {
            return Response(status: .notFound, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(string: "{\"error\":\"no such topic\"}")))
        }
    }

    func redrivesPage() async -> Response {
        do {
            return html(pages.redrives(try await redriveLog.read(), topic: settings.auditTopic, readError: nil))
        } catch {
            return html(pages.redrives([], topic: settings.auditTopic, readError: "\(error)"))
        }
    }

    /// POST from the dead-letters page (preview) or the preview (execute): the form carries the
    /// selection and the CSRF token; execute also carries the count previewed.
    func redrive(_ request: Request, execute: Bool) async throws -> Response {
        guard mayAct, let producer = producers?.current() else { return refused() }
        if execute {
            // Read, check and send under the one action permit; a preview needs none.
            return try await actions.withPermit { try await redrive(request, producer: producer, execute: true) }
        }
        return try await redrive(request, producer: producer, execute: false)
    }

    private func redrive(_ request: Request, producer: KafkaProducer, execute: Bool) async throws -> Response {
        let form = try await Self.form(request)
        guard ConstantTime.equal(Array((form["csrf"] ?? "").utf8), Array(csrf.utf8)) else { return refused() }
        let expected = try execute ? form["expected"].map { try RequestParameters.number($0, name: "expected", 0...Int64.max, what: "a count") } : nil
        let selection: DeadLetterSelection
        do throws(BadParameter) {
            selection = DeadLetterSelection(query: try DeadLetterSelection.withTimesChecked(form))
        } catch {
            return Self.badRequest(error)
        }
        let (entries, redrives, error) = await entries(fresh: true)
        if let error { return html(notFound("cannot read the dead letters: \(error)"), status: 503) }
        let selected = entries.filter { e in selection.matches(e) && !redrives.contains { $0.covers(e) } }
        let alreadyRedriven = entries.filter(selection.matches).count - selected.count
        let plan = RedrivePlan(selected, maxRedrives: settings.maxRedrives, stageTopics: stageTopics)
        guard execute else { return html(pages.redrivePreview(selection, plan: plan, alreadyRedriven: alreadyRedriven, csrf: csrf, note: nil)) }
        guard let expected, expected == Int64(plan.sends.count) else {
            let note = "The selection changed since the preview (\(form["expected"] ?? "?") records then, \(plan.sends.count) now): nothing was sent. Check this preview."
            return html(pages.redrivePreview(selection, plan: plan, alreadyRedriven: alreadyRedriven, csrf: csrf, note: note), status: 409)
        }
        let outcome = try await plan.execute(with: producer)
        let sentEntries = selected.filter { e in if case .send = DeadLetterRedrive.decide(e, maxRedrives: settings.maxRedrives) { true } else { false } }
        let record = RedriveRecord(
            time: Self.now(), who: CurrentUser.user.name, selection: selection, maxRedrives: settings.maxRedrives,
            sent: outcome.sent, failed: outcome.failed.count, exhausted: plan.exhausted.count, redriven: sentEntries)
        try await redriveLog.append(record, with: producer)
        cache.withLock { $0 = nil }
        logger.notice("redrive", metadata: ["who": "\(CurrentUser.user.name)", "selection": "\(selection.flags)", "sent": "\(outcome.sent)", "failed": "\(outcome.failed.count)"])
        return html(pages.redriveDone(record))
    }

    /// POST from one dead letter's page: marks it handled (recorded in the redrive log with who
    /// and when; nothing is sent), so that later previews leave it out.
    func markHandled(_ request: Request) async throws -> Response {
        guard mayAct, let producer = producers?.current() else { return refused() }
        return try await actions.withPermit { try await markHandled(request, producer: producer) }
    }

    private func markHandled(_ request: Request, producer: KafkaProducer) async throws -> Response {
        let form = try await Self.form(request)
        guard ConstantTime.equal(Array((form["csrf"] ?? "").utf8), Array(csrf.utf8)) else { return refused() }
        let selection = DeadLetterSelection(query: form)
        guard selection.letters.count == 1, selection.value("letter") == form["letter"] else {
            return Self.badRequest(BadParameter(name: "letter", reason: "names no dead letter (expected topic/partition@offset)"))
        }
        let (entries, _, error) = await entries(fresh: true)
        if let error { return html(notFound("cannot read the dead letters: \(error)"), status: 503) }
        let marked = entries.filter(selection.matches)
        guard let entry = marked.first else { return html(notFound("no dead letter \(selection.value("letter"))"), status: 404) }
        let record = RedriveRecord(
            time: Self.now(), who: CurrentUser.user.name, selection: selection, maxRedrives: settings.maxRedrives,
            sent: 0, failed: 0, exhausted: 0, redriven: marked, markedHandled: true)
        try await redriveLog.append(record, with: producer)
        cache.withLock { $0 = nil }
        logger.notice("dead letter marked handled", metadata: ["who": "\(CurrentUser.user.name)", "letter": "\(selection.value("letter"))"])
        return html(pages.deadLetter(entry, csrf: csrf, redrivenBy: record))
    }

    /// 400 for a parameter a route cannot take, with the reason.
    static func badRequest(_ error: BadParameter) -> Response {
        var fields = securityHeaders
        fields[.connection] = "close"
        fields[.contentType] = "text/html; charset=utf-8"
        let page = HTML.page(title: "Bad request", nav: "", body: "<h1>Bad request</h1><p class=\"error\">\(HTML.text(error.description))</p><p><a href=\"/\">stages</a></p>")
        return Response(status: .badRequest, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(string: page)))
    }

    /// Whether the request being answered may change anything: not with --read-only, not as a viewer.
    var mayAct: Bool { !settings.readOnly && CurrentUser.user.role == .operator }

    func refused() -> Response {
        var response = html(HTML.page(title: "Refused", nav: "", body: "<h1>Refused</h1><p>The console is read-only, your token's role is viewer, or the form is not one this console served (CSRF token missing or stale): open the page again.</p>"), status: 403)
        response.headers[.connection] = "close"
        return response
    }

    /// The reset page: the form; with a target, the diff (`execute`: commit it if the plan is
    /// still the one shown, else show the new one).
    func resetPage(_ name: String, _ values: [String: String], execute: Bool) async -> Response {
        guard let stage = state.row(name) else { return html(notFound("no stage \(name)"), status: 404) }
        let csrf = mayAct ? csrf : nil
        guard let to = values["to"] else {
            return html(pages.reset(stage: stage, request: values, prepared: nil, error: nil, csrf: csrf, done: false))
        }
        let topic = values["topic"] ?? stage.inputs.first ?? ""
        let value = (values["value"] ?? "").trimmingCharacters(in: .whitespaces)
        let target: OffsetResetTarget
        do throws(BadParameter) {
            switch to {
            case "earliest": target = .earliest
            case "latest": target = .latest
            case "datetime": target = .time(try RequestParameters.time(value, name: "value"))
            case "shift": target = .shift(try RequestParameters.number(value, name: "value", NumberBounds.shift, what: "a shift (records)"))
            case "offset": target = .offset(try RequestParameters.number(value, name: "value", NumberBounds.offset, what: "an offset"))
            default: throw BadParameter(name: "to", reason: "no target '\(to)'")
            }
        } catch {
            return html(pages.reset(stage: stage, request: values, prepared: nil, error: error.reason, csrf: csrf, done: false), status: 400)
        }
        guard stage.inputs.contains(topic) else {
            return html(pages.reset(stage: stage, request: values, prepared: nil, error: "\(topic) is not an input of \(name)", csrf: csrf, done: false), status: 400)
        }
        do {
            let admin = try KafkaAdmin(configuration: kafka, timeout: .seconds(10))
            defer { Task { await admin.close() } }
            let prepared = try await PreparedOffsetReset.prepare(group: stage.group, topic: topic, partitions: [], target: target, admin: admin, kafka: kafka)
            guard execute else { return html(pages.reset(stage: stage, request: values, prepared: prepared, error: nil, csrf: csrf, done: false)) }
            if let live = stage.members, live > 0 {
                return html(pages.reset(stage: stage, request: values, prepared: prepared, error: "\(live) worker(s) of \(name) report themselves alive: stop them first; nothing was committed.", csrf: csrf, done: false), status: 409)
            }
            let fingerprint = prepared.plan.map { "\($0.partition):\($0.target)" }.joined(separator: ",")
            guard fingerprint == values["plan"] else {
                return html(pages.reset(stage: stage, request: values, prepared: prepared, error: "The offsets changed since the diff was shown: nothing was committed. Check this diff.", csrf: csrf, done: false), status: 409)
            }
            try await prepared.execute(admin: admin)
            logger.notice("offsets reset", metadata: ["who": "\(CurrentUser.user.name)", "group": "\(stage.group)", "topic": "\(topic)", "plan": "\(fingerprint)"])
            return html(pages.reset(stage: stage, request: values, prepared: prepared, error: nil, csrf: csrf, done: true))
        } catch {
            return html(pages.reset(stage: stage, request: values, prepared: nil, error: "\(error)", csrf: csrf, done: false), status: 409)
        }
    }

    /// An `application/x-www-form-urlencoded` body (at most 16 KiB), read as strictly as a query.
    static func form(_ request: Request) async throws -> [String: String] {
        let body = try await request.body.collect(upTo: 16 << 10)
        guard let text = String(validating: body.readableBytesView, as: UTF8.self) else {
            throw BadParameter(name: "the form", reason: "the body is not UTF-8")
        }
        return try RequestParameters.decode(text)
    }

    func deadLetterPage(_ partition: String, _ offset: String) async throws -> Response {
        let p = Int32(try RequestParameters.number(try RequestParameters.path(partition, name: "partition"), name: "partition", NumberBounds.partition, what: "a partition"))
        let o = try RequestParameters.number(try RequestParameters.path(offset, name: "offset"), name: "offset", NumberBounds.offset, what: "an offset")
        for topic in deadLetterTopics {
            if let entry = try? await deadLetterReader.entry(partition: p, offset: o, topic: topic) {
                let (_, redrives, _) = await entries()
                return html(pages.deadLetter(entry, csrf: mayAct ? csrf : nil, redrivenBy: redrives.last { $0.covers(entry) }))
            }
        }
        return html(notFound("no dead letter at partition \(p), offset \(o)"), status: 404)
    }

    func notFound(_ what: String) -> String {
        HTML.page(title: "Not found", nav: "", body: "<h1>Not found</h1><p>\(HTML.text(what))</p><p><a href=\"/\">stages</a></p>")
    }

    struct StagesJSON: Encodable {
        struct Row: Encodable {
            var stage: String
            var status: String
            var cells: [String: String]
        }
        var updated: String
        var stages: [Row]
    }

    func stagesJSON() -> Response {
        let body = StagesJSON(updated: HTML.time(Self.now()), stages: state.rows().map { .init(stage: $0.stage, status: $0.status, cells: ConsolePages.cells($0)) })
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let bytes = (try? encoder.encode(body)) ?? Data("{}".utf8)
        var fields = Self.securityHeaders
        fields[.contentType] = "application/json"
        return Response(status: .ok, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    // MARK: Login (only when a token is required)

    static func loginPage(failed: Bool) -> String {
        HTML.page(title: "Sign in", nav: "", body: """
            <h1>Sign in</h1>\(failed ? "<p class=\"error\">That is not one of the console's tokens.</p>" : "")
            <form method="post" action="/login"><label>Token <input type="password" name="token" autocomplete="current-password"></label> \
            <button type="submit">Sign in</button></form>
            """)
    }

    /// Starts a session for the token's owner (a random identifier in the cookie, nothing of the token).
    func login(_ request: Request) async throws -> Response {
        let presented = try await Self.form(request)["token"] ?? ""
        guard settings.access.requiresToken, let user = settings.access.user(presenting: Array(presented.utf8)) else {
            return html(Self.loginPage(failed: settings.access.requiresToken), status: settings.access.requiresToken ? 401 : 404)
        }
        var fields = Self.securityHeaders
        fields[.location] = "/"
        fields[.setCookie] = sessions.setCookie(sessions.start(user))
        logger.info("signed in", metadata: ["who": "\(user.name)", "role": "\(user.role.rawValue)"])
        return Response(status: .seeOther, headers: fields)
    }

    /// Ends the request's session (its cookie is then refused, also if kept) and clears the cookie.
    func logout(_ request: Request) -> Response {
        if let id = Sessions.id(inCookies: request.headers[.cookie]) { sessions.end(id) }
        var fields = Self.securityHeaders
        fields[.location] = settings.access.requiresToken ? "/login" : "/"
        fields[.setCookie] = Sessions.clearCookie
        return Response(status: .seeOther, headers: fields)
    }

    // MARK: Responses

    func html(_ page: String, status: HTTPResponse.Status = .ok) -> Response {
        var fields = Self.securityHeaders
        fields[.contentType] = "text/html; charset=utf-8"
        return Response(status: status, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(string: page)))
    }

    static func asset(_ text: String, type: String) -> Response {
        var fields = securityHeaders
        fields[.contentType] = type
        fields[.cacheControl] = "max-age=300"
        return Response(status: .ok, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    /// A refusal in plain text; the connection is closed once it is written.
    static func refusal(_ status: Int, _ text: String) -> Response {
        var response = plain(status, text)
        response.headers[.connection] = "close"
        return response
    }

    static func plain(_ status: Int, _ text: String) -> Response {
        var fields = securityHeaders
        fields[.contentType] = "text/plain; charset=utf-8"
        return Response(status: HTTPResponse.Status(code: status), headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
}

import Foundation
import Kafka
import Logging
import Metrics
import Operations
import Pipeline
import SafeFetch
import ServiceLifecycle
import Synchronization

/// How `pipelinectl ingest poll` polls one upstream list.
public struct PollSettings: Sendable {
    public var source: PollSource
    /// The list endpoint (hangouts: with `{page}` where the page number goes).
    public var url: String
    /// Where changed records go (default: the stream's input topic).
    public var topic: String
    /// The ledger's compacted topic (see ``LedgerTopic``).
    public var stateTopic: String
    public var interval: Duration = .seconds(60)
    /// Items per page asked for, where the API takes a page size.
    public var pageSize = 100
    /// A listing longer than this many pages is read in part (and so never counts as complete).
    public var maxPages = 1_000
    /// Produce a tombstone (with `event-type: deleted`) for a key a complete listing no longer has.
    public var tombstones = false
    /// Requests per second to one host.
    public var requestsPerSecond: Double = 2
    /// Poll once and return.
    public var once = false

    public init(source: PollSource, url: String, topic: String? = nil, stateTopic: String? = nil) {
        self.source = source
        self.url = url
        self.topic = topic ?? source.stream.topic
        self.stateTopic = stateTopic ?? "pipeline.poll-state.\(source.rawValue)"
    }
}

/// What one poll did.
public struct PollSummary: Sendable, Codable, Equatable {
    public var pages = 0
    /// Pages answered 304 Not Modified (their items known from the last poll).
    public var notModified = 0
    public var seen = 0
    /// Listed items without a key: not produced.
    public var unkeyed = 0
    /// Keys listed twice in one poll: counted once.
    public var duplicates = 0
    public var changed = 0
    public var produced = 0
    public var tombstoned = 0
    /// Records the broker did not acknowledge: tried again at the next poll.
    public var failed = 0
    /// The listing's end was reached without an error (not at --max-pages): only then can a
    /// key that is not listed have been deleted.
    public var complete = false
    public var errors: [String] = []

    public init() {}

    /// A poll that read every page and delivered everything it produced.
    public var succeeded: Bool { errors.isEmpty && failed == 0 }
}

/// `pipelinectl ingest poll SOURCE` as a service: polls the list every interval and produces
/// only the items whose content changed since what was last produced for their key.
///
/// Per poll: the pages are fetched one after the other (the fetcher's destination checks,
/// timeouts and retries; a per-host rate limit; `If-None-Match`/`If-Modified-Since` when the
/// server sent an `ETag`/`Last-Modified` for that page, a 304 reusing the page's items); the
/// changed items are produced (idempotent, acks=all) and, once acknowledged, their hashes are
/// written to the ledger topic. A crash between the two produces those items once more after
/// the restart (at least once), never loses one. A page that fails or does not parse ends the
/// poll's reading (logged with its URL and status, counted); what was read before it is still
/// produced, and the next poll starts over.
public final class Poller: Service, Sendable {
    public let settings: PollSettings
    let fetcher: SafeFetcher
    let producers: ProducerSlot
    let ledgerTopic: LedgerTopic
    let health: PollHealth
    let logger: Logger
    let hostLimit: RateLimiter
    /// Every poll's summary (the command prints the last one with --once).
    let summaries = Mutex<[PollSummary]>([])

    public init(settings: PollSettings, fetcher: SafeFetcher, producers: ProducerSlot, kafka: KafkaConfiguration, health: PollHealth, logger: Logger) {
        self.settings = settings
        self.fetcher = fetcher
        self.producers = producers
        self.ledgerTopic = LedgerTopic(topic: settings.stateTopic, kafka: kafka)
        self.health = health
        self.logger = logger
        self.hostLimit = RateLimiter(perSecond: settings.requestsPerSecond, burst: 1)
        // Every series exists from the start (at 0), so a dashboard or an alert on errors
        // sees "none yet" rather than "no data".
        for kind in ["timeout", "connection", "http_status", "destination", "too_large", "request", "parse", "produce", "state"] {
            count(PollMetricName.errors, ("kind", kind), by: 0)
        }
        for outcome in ["ok", "partial", "failed"] { count(PollMetricName.polls, ("outcome", outcome), by: 0) }
        for outcome in ["seen", "changed", "produced", "tombstoned", "failed", "unkeyed"] { count(PollMetricName.records, ("outcome", outcome), by: 0) }
        for status in ["200", "304"] { count(PollMetricName.pages, ("status", status), by: 0) }
    }

    public var lastSummary: PollSummary? { summaries.withLock { $0.last } }

    /// The poller's memory between polls.
    struct State {
        var ledger: ChangeLedger
        var pages: [String: CachedPage] = [:]
    }

    /// A page's validators and items, for a conditional request and its 304.
    struct CachedPage {
        var etag: String?
        var lastModified: String?
        var page: ListPage
    }

    public func run() async throws {
        let first = try settings.source.firstPage(url: settings.url, pageSize: settings.pageSize)
        try await ledgerTopic.ensure()
        var state = State(ledger: try await ledgerTopic.load())
        logger.info("poller started", metadata: [
            "source": "\(settings.source.rawValue)", "url": "\(settings.url)", "topic": "\(settings.topic)",
            "state-topic": "\(settings.stateTopic)", "known-keys": "\(state.ledger.hashes.count)",
        ])
        health.started()
        var number = 0
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            number += 1
            let summary = await poll(first, number: number, state: &state)
            summaries.withLock { $0.append(summary) }
            if settings.once { break }
            // Waits for the next poll, or for the end.
            try? await cancelWhenGracefulShutdown { [interval = settings.interval] in try await Task.sleep(for: interval) }
        }
        health.stopping()
    }

    /// One poll: read the pages, produce the changes, persist their hashes.
    func poll(_ first: PageRequest, number: Int, state: inout State) async -> PollSummary {
        let started = ContinuousClock.now
        let source = settings.source.rawValue
        var summary = PollSummary()
        var items: [ListItem] = []
        var request: PageRequest? = first
        while let current = request {
            guard summary.pages < settings.maxPages else {
                // Read in part: never complete, so nothing beyond it is taken for deleted.
                logger.warning("stopped at --max-pages \(settings.maxPages): the listing is read in part", metadata: ["url": "\(current.url)"])
                request = nil
                break
            }
            let page: ListPage
            switch await fetch(current, state: &state) {
            case .success(let (fetched, notModified)):
                page = fetched
                if notModified { summary.notModified += 1 }
            case .failure(let error):
                summary.errors.append(error.description)
                count(PollMetricName.errors, ("kind", error.kind))
                logger.error("page failed", metadata: ["url": "\(current.url)", "kind": "\(error.kind)", "error": "\(error)"])
                request = nil
                continue
            }
            summary.pages += 1
            summary.unkeyed += page.unkeyed
            items += page.items
            request = page.next
            if request == nil { summary.complete = summary.errors.isEmpty }
        }
        summary.seen = items.count
        let (changed, duplicates) = state.ledger.changes(in: items)
        summary.duplicates = duplicates
        summary.changed = changed.count

        var records = changed.map { ProducerRecord(topic: settings.topic, key: Array($0.key.utf8), value: $0.value) }
        var changes: [(key: String, hash: UInt64?)] = changed.map { ($0.key, $0.hash) }
        if settings.tombstones && summary.complete {
            for key in state.ledger.vanished(listed: Set(items.map(\.key))) {
                var tombstone = ProducerRecord(topic: settings.topic, key: Array(key.utf8), value: nil)
                tombstone.headers = [KafkaHeader(key: "event-type", string: "deleted")]
                records.append(tombstone)
                changes.append((key, nil))
            }
        }
        if !records.isEmpty {
            let delivered = await produce(records, changes: changes, into: &summary)
            for change in delivered {
                if let hash = change.hash { state.ledger.produced(change.key, hash: hash) } else { state.ledger.deleted(change.key) }
            }
            if !delivered.isEmpty { await persist(delivered, into: &summary) }
        }

        let outcome = summary.succeeded ? "ok" : (summary.pages == 0 ? "failed" : "partial")
        count(PollMetricName.polls, ("outcome", outcome))
        count(PollMetricName.pages, ("status", "200"), by: summary.pages - summary.notModified)
        count(PollMetricName.pages, ("status", "304"), by: summary.notModified)
        count(PollMetricName.records, ("outcome", "seen"), by: summary.seen)
        count(PollMetricName.records, ("outcome", "changed"), by: summary.changed)
        count(PollMetricName.records, ("outcome", "produced"), by: summary.produced)
        count(PollMetricName.records, ("outcome", "tombstoned"), by: summary.tombstoned)
        count(PollMetricName.records, ("outcome", "failed"), by: summary.failed)
        count(PollMetricName.records, ("outcome", "unkeyed"), by: summary.unkeyed)
        Metrics.Timer(label: PollMetricName.pollSeconds, dimensions: [("source", source)]).record(duration: ContinuousClock.now - started)
        if summary.succeeded {
            health.polled()
            Gauge(label: PollMetricName.lastSuccess, dimensions: [("source", source)]).record(Date().timeIntervalSince1970)
        }
        logger.info("poll finished", metadata: [
            "poll": "\(number)", "source": "\(source)", "outcome": "\(outcome)", "pages": "\(summary.pages)", "not-modified": "\(summary.notModified)",
            "seen": "\(summary.seen)", "changed": "\(summary.changed)", "produced": "\(summary.produced)",
            "tombstoned": "\(summary.tombstoned)", "failed": "\(summary.failed)", "errors": "\(summary.errors.count)",
        ])
        return summary
    }

    /// Why a page could not be used: `kind` is the metric's label.
    struct PageFailure: Error, CustomStringConvertible {
        var kind: String
        var url: String
        var reason: String
        var description: String { reason.hasPrefix(url) ? reason : "\(url): \(reason)" }
    }

    private func fetch(_ request: PageRequest, state: inout State) async -> Result<(ListPage, Bool), PageFailure> {
        let url = request.url
        if let host = URL(string: url.replacingOccurrences(of: "{page}", with: "0"))?.host {
            while let wait = hostLimit.admit(host) {
                do { try await Task.sleep(for: wait) } catch { break }
            }
        }
        var headers: [(String, String)] = []
        let cached = state.pages[url]
        if let etag = cached?.etag { headers.append(("If-None-Match", etag)) }
        if let lastModified = cached?.lastModified { headers.append(("If-Modified-Since", lastModified)) }
        let response: FetchedResponse
        do {
            response = try await fetcher.fetch(url, headers: headers, accept: "application/json")
        } catch {
            // FetchError's description starts with the URL already.
            return .failure(PageFailure(kind: Self.kind(of: error), url: url, reason: error.description))
        }
        if response.status == 304 {
            guard let cached else {
                return .failure(PageFailure(kind: "http_status", url: url, reason: "HTTP 304 to a request without validators"))
            }
            return .success((cached.page, true))
        }
        do {
            let page = try settings.source.parse(response.bytes, request: request)
            let etag = response.header("ETag"), lastModified = response.header("Last-Modified")
            state.pages[url] = (etag ?? lastModified) == nil ? nil : CachedPage(etag: etag, lastModified: lastModified, page: page)
            return .success((page, false))
        } catch {
            return .failure(PageFailure(kind: "parse", url: url, reason: "HTTP \(response.status), \(response.bytes.count) bytes: \(error.reason)"))
        }
    }

    static func kind(of error: FetchError) -> String {
        switch error {
        case .timedOut: "timeout"
        case .connectionFailed, .resolutionFailed: "connection"
        case .httpStatus: "http_status"
        case .destinationNotAllowed: "destination"
        case .tooLarge: "too_large"
        case .tooManyRedirects, .redirectWithoutLocation, .invalidURL, .unsupportedScheme, .fileNotAllowed, .fileReadFailed: "request"
        }
    }

    /// Produces `records` (the changes at the same indexes); returns the changes acknowledged.
    private func produce(_ records: [ProducerRecord], changes: [(key: String, hash: UInt64?)], into summary: inout PollSummary) async -> [(key: String, hash: UInt64?)] {
        let reports: [DeliveryReport]
        do {
            reports = try await producers.current().send(records)
        } catch {
            summary.failed += records.count
            summary.errors.append("produce: \(error)")
            count(PollMetricName.errors, ("kind", "produce"))
            logger.error("produce failed", metadata: ["records": "\(records.count)", "error": "\(error)"])
            return []
        }
        var delivered: [(key: String, hash: UInt64?)] = []
        var firstError: String?
        for (index, report) in reports.enumerated() {
            if let error = report.error {
                summary.failed += 1
                firstError = firstError ?? "\(error)"
                continue
            }
            delivered.append(changes[index])
            if changes[index].hash == nil { summary.tombstoned += 1 } else { summary.produced += 1 }
        }
        if let firstError {
            summary.errors.append("produce: \(summary.failed) records not acknowledged: \(firstError)")
            count(PollMetricName.errors, ("kind", "produce"))
            logger.error("records not acknowledged (tried again at the next poll)", metadata: ["failed": "\(summary.failed)", "error": "\(firstError)"])
        }
        return delivered
    }

    /// Writes the delivered changes' hashes to the ledger topic. If that fails, the running
    /// poller still knows them; only a restart before the next successful write re-produces them.
    private func persist(_ delivered: [(key: String, hash: UInt64?)], into summary: inout PollSummary) async {
        let records = ledgerTopic.records(delivered)
        var failure: String?
        do {
            let reports = try await producers.current().send(records)
            if let error = reports.first(where: { $0.error != nil })?.error { failure = "\(error)" }
        } catch {
            failure = "\(error)"
        }
        if let failure {
            summary.errors.append("state topic \(ledgerTopic.topic): \(failure)")
            count(PollMetricName.errors, ("kind", "state"))
            logger.error("could not record what was produced in the state topic (a restart now would produce it again)", metadata: [
                "topic": "\(ledgerTopic.topic)", "error": "\(failure)",
            ])
        }
    }

    private func count(_ label: String, _ dimension: (String, String), by n: Int = 1) {
        Counter(label: label, dimensions: [("source", settings.source.rawValue), dimension]).increment(by: Int64(n))
    }
}

/// The pollers' metric names.
public enum PollMetricName {
    /// `{source, outcome}`: polls that read and delivered everything (ok), some (partial), no page (failed).
    public static let polls = "pipeline_poll_polls_total"
    /// `{source, status}`: pages read, 200 (parsed) or 304 (known).
    public static let pages = "pipeline_poll_pages_total"
    /// `{source, outcome}`: listed items seen, changed, produced, tombstoned, failed (not acknowledged), unkeyed.
    public static let records = "pipeline_poll_records_total"
    /// `{source, kind}`: timeout, connection, http_status, destination, too_large, request, parse, produce, state.
    public static let errors = "pipeline_poll_errors_total"
    /// `{source}`: seconds since the epoch of the last poll that read and delivered everything.
    public static let lastSuccess = "pipeline_poll_last_success_timestamp_seconds"
    /// `{source}`: how long a poll takes.
    public static let pollSeconds = "pipeline_poll_duration_seconds"
}

/// `/healthz` and `/readyz` of a poller: live once it runs; ready until `--readiness-timeout`
/// passes without a successful poll (counted from the start), and not while stopping.
public final class PollHealth: HealthReporting {
    private struct State {
        var running = false
        var stopping = false
        var lastSuccess: ContinuousClock.Instant?
        var started: ContinuousClock.Instant = .now
    }

    private let state = Mutex(State())
    public let readinessTimeout: Duration

    public init(readinessTimeout: Duration) {
        self.readinessTimeout = readinessTimeout
    }

    func started(now: ContinuousClock.Instant = .now) { state.withLock { $0.running = true; $0.started = now } }
    func polled(now: ContinuousClock.Instant = .now) { state.withLock { $0.lastSuccess = now } }
    func stopping() { state.withLock { $0.stopping = true } }

    public func liveness(now: ContinuousClock.Instant = .now) -> HealthStatus {
        HealthStatus(ok: true, reason: "ok")  // the process answers; readiness says whether it polls
    }

    public func readiness(now: ContinuousClock.Instant = .now) -> HealthStatus {
        state.withLock { s in
            if !s.running { return HealthStatus(ok: false, reason: "loading the state topic") }
            if s.stopping { return HealthStatus(ok: false, reason: "stopping") }
            let since = s.lastSuccess ?? s.started
            if now - since > readinessTimeout {
                return HealthStatus(ok: false, reason: s.lastSuccess == nil
                    ? "no successful poll in \(now - since) since the start (--readiness-timeout \(readinessTimeout))"
                    : "no successful poll for \(now - since) (--readiness-timeout \(readinessTimeout))")
            }
            return HealthStatus(ok: true, reason: "ok")
        }
    }
}

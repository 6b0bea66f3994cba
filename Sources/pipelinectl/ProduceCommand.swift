import ArgumentParser
import Foundation
import Pipeline
import Kafka
import Operations

extension UpstreamStream: ExpressibleByArgument {}

/// `pipelinectl produce STREAM [FILE…]`: upstream JSON into the stream's input topic, keyed by entity.
struct Produce: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Produce upstream JSON (lines or arrays, files or stdin) to a stream's input topic, keyed by entity.",
        discussion: """
            STREAM is one of prices, products, campaigns, hangouts, challenges; records go to \
            STREAM.raw (or --topic), keyed by market code, product id, campaign id, hangout id or \
            challenge id. Each line is a bare upstream body, a JSON array of them, or an envelope \
            {"key","value","headers","timestamp"} as `pipelinectl run` reads (its key, headers and \
            timestamp are kept). A file that is one JSON array gives one record per element. \
            Values are sent as their exact bytes.

            Rejected lines are listed with their file and line number; every valid line is still \
            produced (exit code 4 when some were rejected). A line whose body names no entity is \
            produced without a key and counted.

            Examples:
              pipelinectl produce hangouts samples/hangouts/stream.jsonl
              curl -s https://api.upbit.com/v1/ticker?markets=KRW-BTC | pipelinectl \\
                  produce prices
              pipelinectl produce challenges samples/challenges/*.jsonl --dry-run --json
            """)

    @Argument(help: "prices, products, campaigns, hangouts or challenges.") var stream: UpstreamStream
    @Argument(help: "Input files (JSON lines or a JSON array); none or '-' reads standard input.") var files: [String] = []
    @Option(help: "The topic to produce to (default: STREAM.raw).") var topic: String?
    @Flag(help: "Parse and report, produce nothing.") var dryRun = false
    @Flag(help: "Print the summary as JSON.") var json = false
    @OptionGroup var connection: ClusterConnection<ExistingClusterWhenUsed>

    func validate() throws {
        for file in files where file != "-" && !FileManager.default.isReadableFile(atPath: file) {
            throw ValidationError("FILE: cannot read '\(file)': check the path")
        }
        if !dryRun { _ = try connection.configuration() }
    }

    struct Summary: Encodable {
        var topic: String
        var produced: Int
        var keyed: Int
        var unkeyed: Int
        var rejected: [Rejected]
        var failed: Int
        var dryRun: Bool
        struct Rejected: Encodable { var source: String; var line: Int; var reason: String }
    }

    func run() async throws {
        let parser = ProduceParser(stream: stream, topic: topic)
        var lines: [ProduceLine] = []
        var rejected: [RejectedLine] = []
        for file in files.isEmpty ? ["-"] : files {
            let data: Data
            if file == "-" {
                data = await BlockingExecutor.run { FileHandle.standardInput.readDataToEndOfFile() }  // off the cooperative pool
            } else {
                do { data = try Data(contentsOf: URL(fileURLWithPath: file)) } catch {
                    throw ValidationError("FILE: cannot read '\(file)': \(error.localizedDescription)")
                }
            }
            let parsed = parser.parse(Array(data), source: file == "-" ? "stdin" : file)
            lines += parsed.records
            rejected += parsed.rejected
        }
        for r in rejected { Terminal.error("rejected \(r)") }

        var failed = 0
        if !dryRun, !lines.isEmpty {
            try Preflight.checkRuntime()
            let producer = try KafkaProducer(configuration: ProducerConfiguration(kafka: try connection.configuration()))
            let progress = ProgressIndicator("producing to \(parser.topic)", total: lines.count)
            defer { progress.finish() }
            var sent = 0
            for chunk in stride(from: 0, to: lines.count, by: 10_000) {
                let slice = lines[chunk..<min(chunk + 10_000, lines.count)]
                let reports = try await producer.send(slice.map(\.record))
                for (line, report) in zip(slice, reports) where report.error != nil {
                    failed += 1
                    if failed <= 10 { Terminal.error("not delivered \(line.source):\(line.line): \(report.error!)") }
                }
                sent += slice.count
                progress.update(sent)
            }
            progress.finish()
            await producer.close()
        }
        let keyed = lines.filter(\.keyed).count
        let summary = Summary(
            topic: parser.topic, produced: lines.count - failed, keyed: keyed, unkeyed: lines.count - keyed,
            rejected: rejected.map { .init(source: $0.source, line: $0.line, reason: $0.reason) }, failed: failed, dryRun: dryRun)
        if json {
            try printJSON(summary)
        } else {
            let verb = dryRun ? "would produce" : "produced"
            print("\(verb) \(summary.produced) records to \(summary.topic) (\(keyed) keyed by \(stream.entity), \(summary.unkeyed) without a key)")
            if !rejected.isEmpty { print("rejected \(rejected.count) lines (listed above)") }
            if failed > 0 { print("failed to deliver \(failed) records") }
        }
        if failed > 0 { throw ExitCode(Exit.failure) }
        if !rejected.isEmpty { throw ExitCode(Exit.partial) }
    }
}

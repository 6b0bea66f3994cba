// The worker's per-record hot path on a fixed input, for instruction counts (scripts/bench-instructions).
//
//     hotpath-bench STAGES COUNT
//
// Builds COUNT Upbit DEFAULT tickers as consumed records (the shape `scripts/bench-pipeline`
// produces: 24 markets keyed by market, 2 % invalid with a negative price, fixed seed), then
// runs what the worker's event loop runs per batch of 1,000: the record mapping in, the stage
// chain STAGES (e.g. `prices.decode`, `prices.candles`, `prices.decode,prices.alerts`), the
// mapping out (outputs with their dedupe-key header, except prices.ticks, which the shipped
// topology declares `dedupe-key: content`, or every output with DEDUPE=header; dead letters
// with their reasons) and the
// produce call into librdkafka's queue (`KafkaProducer.submitUntilFull`, `rd_kafka_produceva`
// with its copies), for a producer with no broker: nothing is sent, so no network thread
// does work in the measured part. The first batch is a warm-up outside the measured function.
//
//     hotpath-bench ingest COUNT
//
// The ingest endpoint's per-record work instead: COUNT of the same tickers (all valid) in
// JSON-lines bodies of 20 (`scripts/bench-ingest`'s posts), each read as `ingest http` reads a
// body (`IngestBatch.parse`: split, validated by the prices decoder, keyed) and submitted to
// the producer's queue as the endpoint submits it. HTTP and the answer are not in it.
//
// `scripts/bench-instructions` runs it under `valgrind --tool=callgrind` counting only inside
// `measuredBatches` (`--toggle-collect`), twice with different COUNTs, and prints the
// difference per record: a figure that repeats to the instruction for the same binary.
import Foundation
import Kafka
import Logging
import Pipeline
import Producers
import Workers

let arguments = CommandLine.arguments
guard arguments.count == 3, let count = Int(arguments[2]), count > 1_000 else {
    FileHandle.standardError.write(Data("usage: hotpath-bench STAGES COUNT (COUNT > 1000)\n".utf8))
    exit(2)
}
let stageNames = arguments[1].split(separator: ",").map(String.init)
let ingest = arguments[1] == "ingest"

let markets = (0..<24).map { "KRW-C\($0)" }
var random = SplitMix64(seed: 7)
let base: Int64 = 1_700_000_000_000
let inputs: [ConsumerRecord] = (0..<count).map { i in
    let market = markets[i % markets.count]
    var price = 1000 + Double(random.next() % 5000) / 10
    if i % 50 == 49 && !ingest { price = -price }
    let t = base + Int64(i) * 3
    let value = """
        {"type":"ticker","code":"\(market)","opening_price":1000.0,"high_price":1600.0,"low_price":990.0,\
        "trade_price":\(price),"prev_closing_price":1001.0,"change":"RISE","signed_change_rate":0.0123,\
        "trade_volume":\(1 + i % 7).5,"acc_trade_volume_24h":12345.678,"trade_timestamp":\(t),\
        "timestamp":\(t + 4),"stream_type":"REALTIME"}
        """
    return ConsumerRecord(topic: "bench.raw", partition: 0, offset: Int64(i), key: Array(market.utf8), value: Array(value.utf8), timestamp: t)
}

if ingest {
    var configuration = ProducerConfiguration(bootstrapServers: [])
    configuration.maxQueuedMessages = 10_000_000
    configuration.messageTimeout = .seconds(3600)
    configuration.kafka.raw["queue.buffering.max.kbytes"] = "2097151"
    var quiet = Logger(label: "hotpath-bench")
    quiet.logLevel = .error
    let producer = try KafkaProducer(configuration: configuration, logger: quiet)
    let validator = IngestValidator()
    // Bodies of 20 JSON lines, as the load posts them.
    let bodies: [[UInt8]] = stride(from: 0, to: count, by: 20).map { start in
        inputs[start..<min(start + 20, count)].reduce(into: [UInt8]()) { body, r in body += r.value!; body.append(0x0A) }
    }
    var tickets: [DeliveryTicket] = []
    var accepted = 0

    @inline(never)
    func measuredBodies(_ bodies: ArraySlice<[UInt8]>) {
        for body in bodies {
            guard let batch = try? IngestBatch.parse(body, stream: .prices, topic: "bench.prices", maxRecords: 1000, validator: validator),
                batch.rejected.isEmpty, let (ticket, stoppedAt) = try? producer.submitUntilFull(ProducerBatch(batch.records)), stoppedAt == nil
            else {
                FileHandle.standardError.write(Data("a body was refused or librdkafka's queue is full\n".utf8))
                exit(1)
            }
            accepted += batch.records.count
            tickets.append(ticket)
        }
    }
    measuredBodies(bodies[0..<50])  // warm-up: 1,000 records
    accepted = 0
    measuredBodies(bodies[50...])
    print("records \(count - 1_000) accepted \(accepted)")
    exit(0)
}

var options = TransformCatalog.Options()
options.alerts = markets.prefix(8).enumerated().map { i, m in
    WatchlistAlertTransform.Subscription(subscriber: "user-\(i)", market: m, threshold: i % 2 == 0 ? 0.01 : -0.01)
}
var runner: TransformRunner
do { runner = try TransformCatalog(options: options).runner(for: stageNames) } catch {
    FileHandle.standardError.write(Data("\(error)\n".utf8))
    exit(2)
}

var configuration = ProducerConfiguration(bootstrapServers: [])
configuration.maxQueuedMessages = 10_000_000
configuration.messageTimeout = .seconds(3600)
configuration.kafka.raw["queue.buffering.max.kbytes"] = "2097151"
var quiet = Logger(label: "hotpath-bench")
quiet.logLevel = .error  // librdkafka warns that there is no broker: that is the point
let producer = try KafkaProducer(configuration: configuration, logger: quiet)
let stageName = stageNames.joined(separator: ",")
/// Output name → topic, looked up as the worker does (`Topology.Stage.topic(forOutput:)`: a
/// dictionary of the stage's outputs), not built per input.
let outputTopics = Dictionary(uniqueKeysWithValues: ["prices.ticks", "prices.latest", "prices.candles.1m", "notifications"].map { ($0, "bench.\($0)") })
/// The shipped topology's `dedupe-key: content` topics (by output name): their outputs get no key
/// and no header. DEDUPE=header gives every output its header, as before that declaration.
let identifiedByContent: Set<String> = ProcessInfo.processInfo.environment["DEDUPE"] == "header" ? [] : ["prices.ticks"]
let topicsIdentifiedByContent = Set(identifiedByContent.compactMap { outputTopics[$0] })
var tickets: [DeliveryTicket] = []
/// As the worker's loop does: each batch's buffer reserves what the last one used per input.
var outputBytesPerInput = 256
var produced = 0

/// What the loop does for one partition's batch (StageLoop.process, minus its bookkeeping).
@inline(__always)
@MainActor func runBatch(_ records: ArraySlice<ConsumerRecord>) {
    var out = TransformOutput(reservingCapacity: records.count, bytesPerRecord: outputBytesPerInput)
    out.outputsIdentifiedByContent = identifiedByContent
    var sources: [Int32] = []
    var batchInputs: [InputRecord] = []
    var deadLetters: [ProducerRecord] = []
    sources.reserveCapacity(records.count)
    batchInputs.reserveCapacity(records.count)
    // Read in place, as the loop reads them.
    records.withUnsafeBufferPointer { records in
        for i in records.indices {
            let input = RecordMapping.input(records.baseAddress! + i, now: base)
            let index = Int32(batchInputs.count)
            let failed = out.failures.count
            runner.process(input, context: TransformContext(now: input.timestamp), into: &out)
            while sources.count < out.count { sources.append(index) }
            if out.failures.count > failed {
                deadLetters += RecordMapping.deadLetters(out.failures[failed...], of: input, stage: stageName, transform: stageName, topic: "bench.dead-letters")
            }
            batchInputs.append(consume input)
        }
    }
    outputBytesPerInput = max(16, out.byteCount / records.count)
    var outgoing = ProducerBatch(reservingCapacity: out.count + deadLetters.count, bytesPerRecord: 0)
    RecordMapping.append(
        &out, sources: sources, timestamp: { batchInputs[Int($0)].timestamp }, topic: { outputTopics[$0] ?? $0 },
        identifiesByContent: topicsIdentifiedByContent.contains, to: &outgoing)
    for d in deadLetters { outgoing.append(d) }
    guard let (ticket, stoppedAt) = try? producer.submitUntilFull(outgoing), stoppedAt == nil else {
        FileHandle.standardError.write(Data("librdkafka's queue is full: raise maxQueuedMessages\n".utf8))
        exit(1)
    }
    produced += outgoing.count
    tickets.append(ticket)
}

@inline(never)
@MainActor func measuredBatches(_ records: ArraySlice<ConsumerRecord>) {
    var start = records.startIndex
    while start < records.endIndex {
        let end = min(start + 1_000, records.endIndex)
        runBatch(records[start..<end])
        start = end
    }
}

runBatch(inputs[0..<1_000])  // warm-up: topic handles, first allocations
produced = 0
measuredBatches(inputs[1_000...])
print("records \(count - 1_000) produced \(produced)")
exit(0)

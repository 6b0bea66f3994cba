import Foundation
import PipelineTesting
import Synchronization
import Testing
@testable import Kafka

/// ``DeliveryReportServing/scheduled(_:)``: reports are served only by the jobs librdkafka's
/// wake-up hands the caller's scheduler, against librdkafka's mock cluster.
@Suite(.timeLimit(.minutes(2))) struct ScheduledServingTests {
    /// A scheduler that runs jobs on a serial queue, or holds them until `release()`.
    final class Jobs: Sendable {
        private let queue = DispatchQueue(label: "scheduled-serving")
        private let held = Mutex<(holding: Bool, jobs: [@Sendable () -> Void], scheduled: Int)>((false, [], 0))

        init(holding: Bool = false) { held.withLock { $0.holding = holding } }

        var serving: DeliveryReportServing {
            .scheduled { [self] job in
                let run = held.withLock { h -> Bool in
                    h.scheduled += 1
                    if h.holding { h.jobs.append(job) }
                    return !h.holding
                }
                if run { queue.async(execute: job) }
            }
        }

        var scheduled: Int { held.withLock { $0.scheduled } }

        /// Runs the held jobs and every later one.
        func release() {
            let jobs = held.withLock { h in
                h.holding = false
                defer { h.jobs = [] }
                return h.jobs
            }
            for job in jobs { queue.async(execute: job) }
        }
    }

    @Test func reportsArriveOnlyThroughTheScheduledJobs() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("scheduled", partitions: 3)
        let jobs = Jobs(holding: true)
        let producer = try KafkaProducer(
            configuration: ProducerConfiguration(bootstrapServers: [mock.bootstrapServers]), serving: jobs.serving)
        let records = (0..<300).map { ProducerRecord(topic: "scheduled", key: Array("k\($0 % 5)".utf8), value: Array("v\($0)".utf8)) }
        let ticket = try await producer.submit(records)
        // The broker acknowledges (librdkafka's wake-up schedules a job), and nothing routes the
        // reports while the job is held: no thread of the producer's own serves them.
        try await eventually("a job for the reports", within: .seconds(20)) { jobs.scheduled >= 2 }
        #expect(jobs.scheduled >= 2, "the first job, and one when the reports arrived")
        let early = await withTaskGroup(of: Bool.self) { group in
            group.addTask { _ = await ticket.reports(); return true }
            group.addTask { try? await Task.sleep(for: .milliseconds(300)); return false }
            defer { group.cancelAll() }
            return await group.next()!
        }
        #expect(!early, "reports arrived with every job held")
        jobs.release()
        let reports = try await producer.send(records)
        #expect(reports.count == 300)
        #expect(reports.allSatisfy { $0.error == nil && $0.offset >= 0 })
        await producer.close()
    }

    @Test func sendEnqueueStatisticsAndCloseWork() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("jobs", partitions: 2)
        var config = ProducerConfiguration(bootstrapServers: [mock.bootstrapServers])
        config.statisticsInterval = .milliseconds(100)
        let jobs = Jobs()
        let producer = try KafkaProducer(configuration: config, serving: jobs.serving)
        for round in 0..<20 {
            let reports = try await producer.send((0..<50).map { ProducerRecord(topic: "jobs", value: Array("\(round)-\($0)".utf8)) })
            #expect(reports.allSatisfy { $0.error == nil && $0.offset >= 0 })
        }
        var ids: Set<UInt64> = []
        for i in 0..<100 { ids.insert(try await producer.enqueue(ProducerRecord(topic: "jobs", value: Array("\(i)".utf8)))) }
        var reported: Set<UInt64> = []
        for await batch in producer.deliveryReports {
            reported.formUnion(batch.map(\.id))
            if reported.count == 100 { break }
        }
        #expect(reported == ids)
        // Statistics are events of the same queue: the jobs serve them too.
        try await eventually("statistics", within: .seconds(10)) { producer.statistics != nil }
        #expect(producer.statistics != nil)
        await producer.close()
        let error = await #expect(throws: KafkaError.self) { try await producer.send(ProducerRecord(topic: "jobs", value: [1])) }
        #expect(error?.code == .closed)
    }

    @Test func closeReportsWhatTheBrokerNeverAcknowledged() async throws {
        let mock = try KafkaMockCluster(brokers: 1)
        try mock.createTopic("away", partitions: 1)
        var config = ProducerConfiguration(bootstrapServers: [mock.bootstrapServers])
        config.messageTimeout = .seconds(60)
        let producer = try KafkaProducer(configuration: config, serving: Jobs().serving)
        _ = try await producer.send(ProducerRecord(topic: "away", value: [0]))
        mock.setBrokerDown(1)
        let ticket = try await producer.submit((0..<10).map { ProducerRecord(topic: "away", value: [UInt8($0)]) })
        // Not delivered within the deadline: purged, and the purge's reports are served by the
        // close itself (the wake-up is off by then).
        await producer.close(deadline: .milliseconds(500))
        let reports = await ticket.reports()
        #expect(reports.count == 10)
        #expect(reports.allSatisfy { $0.error != nil }, "\(reports.map { $0.error?.description ?? "delivered" })")
    }
}

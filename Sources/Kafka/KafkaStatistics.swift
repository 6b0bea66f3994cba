import Foundation

/// The parts of librdkafka's statistics (`statistics.interval.ms`, see librdkafka's
/// STATISTICS.md) that operators watch: queue depth, traffic, broker round trips, per-partition
/// offsets and lag, and the consumer group's state.
public struct KafkaStatistics: Sendable, Hashable {
    public struct Broker: Sendable, Hashable {
        public var name: String
        public var state: String
        /// Average and 99th percentile round trip, microseconds.
        public var rttAverage: Int64
        public var rttP99: Int64
        /// Requests waiting to be sent.
        public var outbufCount: Int64
    }

    public struct Partition: Sendable, Hashable {
        public var topic: String
        public var partition: Int32
        /// The partition's high watermark as last fetched (-1 when unknown).
        public var highWatermark: Int64
        /// The last stable offset (read_committed readers stop here).
        public var lastStableOffset: Int64
        public var committedOffset: Int64
        /// The next offset the application will get.
        public var applicationOffset: Int64
        /// `hi_offset - max(app_offset, committed_offset)`; -1 when unknown.
        public var consumerLag: Int64
        /// Messages waiting to be produced to this partition.
        public var producerQueue: Int64
    }

    public struct Group: Sendable, Hashable {
        /// `up` when the coordinator is known and the member joined.
        public var state: String
        /// `steady` when no rebalance is in progress.
        public var joinState: String
        public var rebalances: Int64
        public var assignmentSize: Int64
    }

    public var clientName: String
    /// Messages in the producer's local queue, and their bytes.
    public var queuedMessages: Int64
    public var queuedBytes: Int64
    public var transmittedMessages: Int64
    public var receivedMessages: Int64
    public var brokers: [Broker]
    public var partitions: [Partition]
    public var group: Group?
    /// An idempotent producer's id and epoch (-1 when not idempotent or not yet assigned).
    public var producerID: Int64
    public var producerEpoch: Int64

    /// Parses librdkafka's statistics JSON; nil when it is not that.
    public init?(json: [UInt8]) {
        guard let root = try? JSONSerialization.jsonObject(with: Data(json)) as? [String: Any] else { return nil }
        func int(_ d: [String: Any]?, _ key: String) -> Int64 { (d?[key] as? NSNumber)?.int64Value ?? -1 }
        clientName = root["name"] as? String ?? ""
        queuedMessages = int(root, "msg_cnt")
        queuedBytes = int(root, "msg_size")
        transmittedMessages = int(root, "txmsgs")
        receivedMessages = int(root, "rxmsgs")
        brokers = ((root["brokers"] as? [String: Any]) ?? [:]).compactMap { name, value in
            guard let b = value as? [String: Any], (b["nodeid"] as? NSNumber)?.intValue ?? -1 >= 0 else { return nil }
            let rtt = b["rtt"] as? [String: Any]
            return Broker(
                name: name, state: b["state"] as? String ?? "", rttAverage: int(rtt, "avg"), rttP99: int(rtt, "p99"),
                outbufCount: int(b, "outbuf_cnt"))
        }.sorted { $0.name < $1.name }
        var partitions: [Partition] = []
        for (topic, value) in (root["topics"] as? [String: Any]) ?? [:] {
            for (_, pv) in ((value as? [String: Any])?["partitions"] as? [String: Any]) ?? [:] {
                guard let p = pv as? [String: Any], let id = (p["partition"] as? NSNumber)?.int32Value, id >= 0 else { continue }
                partitions.append(Partition(
                    topic: topic, partition: id, highWatermark: int(p, "hi_offset"), lastStableOffset: int(p, "ls_offset"),
                    committedOffset: int(p, "committed_offset"), applicationOffset: int(p, "app_offset"),
                    consumerLag: int(p, "consumer_lag"), producerQueue: int(p, "msgq_cnt")))
            }
        }
        self.partitions = partitions.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }
        if let g = root["cgrp"] as? [String: Any] {
            group = Group(
                state: g["state"] as? String ?? "", joinState: g["join_state"] as? String ?? "",
                rebalances: int(g, "rebalance_cnt"), assignmentSize: int(g, "assignment_size"))
        } else {
            group = nil
        }
        let eos = root["eos"] as? [String: Any]
        producerID = int(eos, "producer_id")
        producerEpoch = int(eos, "producer_epoch")
    }
}

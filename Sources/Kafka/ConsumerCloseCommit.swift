import CKafka

/// What a consumer commits when it gives partitions up and when it closes, so that work the
/// application stored is never done again by the next owner:
///
/// - A revocation the application acknowledged: the stored offsets of the revoked partitions
///   are committed before they go (librdkafka drops stored offsets of revoked partitions).
/// - A revocation inside the close, or one the application did not acknowledge: everything
///   stored is committed while the partitions are still this member's.
/// - The close: everything stored is committed; if the group is rebalancing and refuses the
///   commit, the close lets the rebalance settle (within `settleWithin`) and commits what this
///   member holds under the new generation. Partitions another member holds by then are left
///   to it: a commit of ours could move its offsets back.
///
/// Poll thread only: it calls librdkafka directly.
final class ConsumerCloseCommit {
    private let consumer: RDKafkaConsumer
    private let stored: StoredOffsets
    /// The outcome of the last commit inside a revocation of the close.
    private var revocationError: KafkaError?
    /// Assignment callbacks so far when a commit on close was first refused as mid-rebalance.
    private var refusedAtAssignment: Int?

    init(consumer: RDKafkaConsumer, stored: StoredOffsets) {
        self.consumer = consumer
        self.stored = stored
    }

    /// Commits what the application stored for partitions it is giving up, before they go.
    func commitRevoked(_ partitions: [TopicPartition]) {
        let offsets = stored.take(partitions)
        guard !offsets.isEmpty else { return }
        do {
            try consumer.commit(offsets)
        } catch {
            // A lost assignment: the partitions are someone else's already; they read from the last commit.
            consumer.client.logger.warning("commit of revoked partitions failed: \(error)")
        }
    }

    /// Commits stored offsets from inside a revocation the application will not acknowledge
    /// (the consumer is closing).
    func commitInRevocation() {
        do {
            try consumer.commit(nil)
            revocationError = nil
        } catch {
            revocationError = error
            if error.isRebalanceInProgress { refusedAtAssignment = refusedAtAssignment ?? consumer.rebalance.assignments.value }
            consumer.client.logger.info("commit in the revocation failed: \(error)")
        }
    }

    /// Commits what the application stored, leaves the group (the rebalance callback sees the
    /// consumer closing and revokes without waiting for the application), and destroys the
    /// handle. Returns the close's error.
    func close(settleWithin settle: Duration) -> KafkaError? {
        var result: KafkaError?
        var rebalancing = revocationError?.isRebalanceInProgress ?? false
        // Whether everything the application stored is committed before the handle goes.
        var committed = false
        do {
            try consumer.commit(nil)
            committed = !rebalancing
        } catch where error.isRebalanceInProgress {
            rebalancing = true
            refusedAtAssignment = refusedAtAssignment ?? consumer.rebalance.assignments.value
        } catch {
            result = error
            consumer.client.logger.warning("commit on close failed: \(error)")
        }
        if rebalancing {
            // The group is rebalancing and refuses commits until it settles.
            consumer.client.logger.info("closing during a rebalance: committing once it settles")
            if let error = commitAfterRebalance(deadline: .now + settle, assignmentsBefore: refusedAtAssignment ?? consumer.rebalance.assignments.value) {
                result = result ?? error
                consumer.client.logger.warning("commit on close failed: \(error)")
            } else {
                committed = true
            }
            revocationError = nil
        }
        do { try consumer.close() } catch { result = result ?? error }
        // The revocation inside librdkafka's close commits again; once the handle is terminating
        // that commit can fail with _DESTROY (a CI run saw it). After a commit above succeeded it
        // had nothing of the application's left to commit: not the close's error then.
        if let error = revocationError, !error.isRebalanceInProgress,
            !(committed && error.rdKafkaCode == RD_KAFKA_RESP_ERR__DESTROY.rawValue)
        {
            result = result ?? error
        }
        consumer.client.drainLogs()
        // Destroyed here, before close() returns, so that a program can exit right after it.
        consumer.destroy()
        return result
    }

    /// Lets the rebalance finish (serving its callbacks without waiting for the application;
    /// fetched records are dropped, they are not stored), then commits the remembered offsets
    /// of the partitions this member holds under the new generation.
    private func commitAfterRebalance(deadline: ContinuousClock.Instant, assignmentsBefore: Int) -> KafkaError? {
        var lastError: KafkaError?
        var names = RDKafkaConsumer.ConversionCache()
        while ContinuousClock.now < deadline {
            _ = consumer.poll(timeoutMilliseconds: 100, names: &names)
            guard !stored.isEmpty else { return nil }
            // What this member holds now: a commit of them succeeds only once the group has
            // settled with this member in it, and then they are its own.
            guard let held = try? Set(consumer.assignment()) else { continue }
            let offsets = stored.of(held)
            if offsets.isEmpty {
                // Holding none of them: once the rebalance has handed out partitions (an eager one
                // always calls back; a cooperative one too, with nothing new when nothing moved),
                // there is nothing to commit.
                if consumer.rebalance.assignments.value > assignmentsBefore {
                    consumer.client.logger.info("after the rebalance this member holds none of the partitions it stored offsets for; their new owners read from the last commit")
                    return nil
                }
                continue
            }
            do {
                try consumer.commit(offsets)
                consumer.client.logger.info("committed stored offsets after the rebalance", metadata: ["partitions": "\(offsets.count)"])
                return nil
            } catch where error.isRebalanceInProgress {
                lastError = error
            } catch {
                return error
            }
        }
        return lastError ?? KafkaError.timedOut("waiting for the group to settle before the final commit")
    }
}

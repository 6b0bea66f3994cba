import Synchronization

/// Relaxed counting on an `Atomic<Int>`: counters read for reporting, never for synchronisation.
extension Atomic where Value == Int {
    package func add(_ n: Int) { _ = wrappingAdd(n, ordering: .relaxed) }
    public var value: Int { load(ordering: .relaxed) }
}

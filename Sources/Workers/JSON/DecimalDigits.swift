/// Decimal digits of unsigned integers, two at a time from a table of pairs: the one digit writer
/// behind ``JSONWriter``'s numbers and ``DedupeKeyWriter``'s integers (each output of the ticker
/// feed writes a dozen numbers and four integers, so this is on the per-record hot path).
enum DecimalDigits {
    /// How many decimal digits `v` has (1 for 0): log10 from the bit length (1233 / 4096 is just
    /// above log10 2), corrected by one comparison, not a comparison per digit.
    @inline(__always)
    static func count(_ v: UInt64) -> Int {
        // `v | 1`: 0 counts as 1 (one digit); for any other `v` it changes no comparison with a power of ten.
        let v = v | 1
        let bits = 64 &- v.leadingZeroBitCount
        let guess = (bits &* 1233) &>> 12  // ⌊log10 v⌋, or one more
        return guess &+ (v >= powersOfTenInt[guess] ? 1 : 0)
    }

    /// The decimal digits of `v`, ending just before `out[i]`; `i` moves to the first.
    @inline(__always)
    static func write(_ v: UInt64, _ out: UnsafeMutablePointer<UInt8>, _ i: inout Int) {
        let pairs: StaticString = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"
        var v = v
        while v >= 100 {
            let r = Int(truncatingIfNeeded: v % 100) &* 2
            v /= 100
            i &-= 2
            out[i] = pairs.utf8Start[r]
            out[i &+ 1] = pairs.utf8Start[r &+ 1]
        }
        if v >= 10 {
            let r = Int(truncatingIfNeeded: v) &* 2
            i &-= 2
            out[i] = pairs.utf8Start[r]
            out[i &+ 1] = pairs.utf8Start[r &+ 1]
        } else {
            i &-= 1
            out[i] = UInt8(truncatingIfNeeded: v) &+ 0x30
        }
    }
}

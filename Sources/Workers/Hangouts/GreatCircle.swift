/// Great-circle distance on a spherical Earth (haversine), without libm: Workers links no
/// Foundation or C maths, so the three functions it needs are written out here. Their error is
/// far below a metre at any distance, which is all "within a few kilometres" needs.
enum GreatCircle {
    /// Mean Earth radius (IUGG), metres.
    static let earthRadiusMeters = 6_371_008.8

    /// Distance in metres between two points given in degrees.
    static func distanceMeters(lat1: Double, lng1: Double, lat2: Double, lng2: Double) -> Double {
        let rad = Double.pi / 180
        let p1 = lat1 * rad, p2 = lat2 * rad
        let dp = (lat2 - lat1) * rad, dl = (lng2 - lng1) * rad
        let sp = sine(dp / 2), sl = sine(dl / 2)
        let a = min(1, max(0, sp * sp + cosine(p1) * cosine(p2) * sl * sl))
        // 2·atan2(√a, √(1−a)) is the haversine angle, stable near 0 and near antipodes.
        let angle = 2 * arctangent2(a.squareRoot(), (1 - a).squareRoot())
        return earthRadiusMeters * angle
    }

    /// sin(x): reduce to [-π, π], then to [-π/2, π/2] by symmetry, then a Taylor series (terms to x^21).
    static func sine(_ x0: Double) -> Double {
        // Callers pass validated coordinates in radians; anything this large is not an angle
        // (and would not fit the Int64 used for range reduction).
        guard x0.isFinite, abs(x0) < 1e15 else { return .nan }
        let twoPi = 2 * Double.pi
        var x = x0 - twoPi * Double(Int64(x0 / twoPi))
        if x > .pi { x -= twoPi } else if x < -.pi { x += twoPi }
        if x > .pi / 2 { x = .pi - x } else if x < -.pi / 2 { x = -.pi - x }
        let x2 = x * x
        var term = x, sum = x
        var n = 1.0
        for _ in 0..<10 {
            term *= -x2 / ((n + 1) * (n + 2))
            sum += term
            n += 2
        }
        return sum
    }

    static func cosine(_ x: Double) -> Double { sine(x + .pi / 2) }

    /// atan(x) for any x: halve the angle until |x| is small (atan x = 2·atan(x / (1 + √(1+x²)))),
    /// then a Taylor series.
    static func arctangent(_ x0: Double) -> Double {
        guard x0.isFinite else { return x0.isNaN ? .nan : (x0 > 0 ? .pi / 2 : -.pi / 2) }
        var x = x0
        var scale = 1.0
        while abs(x) > 0.1 {
            x = x / (1 + (1 + x * x).squareRoot())
            scale *= 2
        }
        let x2 = x * x
        var term = x, sum = x
        var k = 1.0
        for _ in 0..<12 {
            term *= -x2
            k += 2
            sum += term / k
        }
        return scale * sum
    }

    /// atan2(y, x) for y, x >= 0 (all the haversine needs).
    static func arctangent2(_ y: Double, _ x: Double) -> Double {
        if x == 0 { return y == 0 ? 0 : .pi / 2 }
        return arctangent(y / x)
    }
}

import Testing
@testable import Thumbnails

@Suite("Render: pure resize")
struct RenderTests {
    let renderer = ThumbnailRenderer()
    let box = ThumbnailSpec(name: "grid", width: 100, height: 100, mode: .fit, format: .jpeg, quality: 80)
    let square = ThumbnailSpec(name: "list", width: 64, height: 64, mode: .cover, format: .jpeg, quality: 80)

    @Test("JPEG, PNG and WebP sources fit inside the box, keeping the aspect ratio")
    func fitsEachFormat() throws {
        let sources: [(String, [UInt8], SourceFormat)] = [
            ("jpeg", Fixtures.jpeg(width: 300, height: 200), .jpeg),
            ("png", Fixtures.png(width: 300, height: 200), .png),
            ("webp", Fixtures.webp(width: 300, height: 200), .webp),
        ]
        for (label, bytes, format) in sources {
            let result = try renderer.render(bytes, specs: [box])
            #expect(result.sourceFormat == format, "\(label)")
            #expect(result.sourceWidth == 300 && result.sourceHeight == 200, "\(label)")
            let thumb = try #require(result.thumbnails.first)
            #expect(thumb.metadata.width == 100 && thumb.metadata.height == 67, "\(label)")
            let parsed = try #require(Fixtures.jpegSize(thumb.bytes), "\(label) output is not a JPEG")
            #expect(parsed.width == 100 && parsed.height == 67, "\(label)")
            #expect(thumb.metadata.byteCount == thumb.bytes.count)
            #expect(thumb.metadata.contentHash == ContentHash.sha256Hex(thumb.bytes))
        }
    }

    @Test("cover crops to the exact size")
    func coverCrops() throws {
        let thumb = try renderer.render(Fixtures.png(width: 300, height: 200), spec: square)
        #expect(thumb.metadata.width == 64 && thumb.metadata.height == 64)
        #expect(Fixtures.jpegSize(thumb.bytes).map { [$0.width, $0.height] } == [64, 64])
    }

    @Test("WebP output is a WebP file with the right size")
    func webpOutput() throws {
        var spec = box
        spec.format = .webp
        let thumb = try renderer.render(Fixtures.png(width: 300, height: 200), spec: spec)
        #expect(Array(thumb.bytes.prefix(4)) == Array("RIFF".utf8))
        #expect(Array(thumb.bytes[8..<12]) == Array("WEBP".utf8))
        #expect(thumb.metadata.format == .webp && thumb.metadata.width == 100 && thumb.metadata.height == 67)
    }

    @Test("several specs from one source, in order")
    func severalSpecs() throws {
        let result = try renderer.render(Fixtures.jpeg(width: 300, height: 200), specs: [box, square])
        #expect(result.thumbnails.map(\.metadata.name) == ["grid", "list"])
        #expect(result.thumbnails.map(\.metadata.width) == [100, 64])
    }

    @Test("EXIF orientation 6 is applied: a landscape-stored image comes out portrait")
    func exifOrientation() throws {
        let source = Fixtures.withExif(Fixtures.jpeg(width: 300, height: 200), orientation: 6)
        let plain = try renderer.render(Fixtures.jpeg(width: 300, height: 200), spec: box)
        let rotated = try renderer.render(source, spec: box)
        #expect(plain.metadata.width == 100 && plain.metadata.height == 67)
        #expect(rotated.metadata.width == 67 && rotated.metadata.height == 100)
        #expect(Fixtures.jpegSize(rotated.bytes).map { [$0.width, $0.height] } == [67, 100])
    }

    @Test("EXIF, GPS and every APP segment but JFIF are stripped")
    func metadataStripped() throws {
        let source = Fixtures.withExif(Fixtures.jpeg(width: 300, height: 200), orientation: 1, gps: true)
        // The fixture really carries EXIF with GPS, so the test can fail.
        #expect(Fixtures.jpegAppMarkers(source).contains(0xE1))
        #expect(Fixtures.contains(source, "Exif"))
        let thumb = try renderer.render(source, spec: box)
        #expect(Fixtures.jpegAppMarkers(thumb.bytes).allSatisfy { $0 == 0xE0 })  // JFIF only
        #expect(!Fixtures.contains(thumb.bytes, "Exif"))
        #expect(!Fixtures.contains(thumb.bytes, "ICC_PROFILE"))
        var webpSpec = box
        webpSpec.format = .webp
        let webp = try renderer.render(source, spec: webpSpec)
        #expect(!Fixtures.contains(webp.bytes, "EXIF") && !Fixtures.contains(webp.bytes, "Exif"))
        #expect(!Fixtures.contains(webp.bytes, "ICCP") && !Fixtures.contains(webp.bytes, "XMP "))
        // The rewritten container still decodes to the same size.
        let again = try renderer.render(webp.bytes, spec: box)
        #expect(again.metadata.width == 100 && again.metadata.height == 67)
    }

    @Test("same input and spec give the same key and bytes; a different spec gives another key")
    func deterministic() throws {
        let source = Fixtures.jpeg(width: 300, height: 200)
        let a = try renderer.render(source, spec: box)
        let b = try renderer.render(source, spec: box)
        #expect(a.metadata.key == b.metadata.key)
        #expect(a.bytes == b.bytes)
        var other = box
        other.quality = 70
        let c = try renderer.render(source, spec: other)
        #expect(c.metadata.key != a.metadata.key)
        let d = try renderer.render(Fixtures.jpeg(width: 301, height: 200), spec: box)
        #expect(d.metadata.key != a.metadata.key)
    }

    @Test("several sizes from one decode match the sizes rendered one by one")
    func sharedDecodeMatchesDirect() throws {
        let source = Fixtures.withExif(Fixtures.jpeg(width: 600, height: 400), orientation: 6)
        let specs = [
            ThumbnailSpec(name: "list", width: 50, height: 50, mode: .cover),
            ThumbnailSpec(name: "grid", width: 150, height: 150, mode: .fit, format: .webp),
            ThumbnailSpec(name: "wide", width: 90, height: 30, mode: .cover),
        ]
        // Upright the image is 400x600; the grid needs 100x150, so that is the shared decode.
        #expect(ThumbnailRenderer.sharedDecodeBox(specs, source: (400, 600))! == (100, 150))
        let together = try renderer.render(source, specs: specs).thumbnails
        let alone = try specs.map { try renderer.render(source, spec: $0) }
        #expect(together.map { [$0.metadata.width, $0.metadata.height] } == [[50, 50], [100, 150], [90, 30]])
        #expect(together.map { [$0.metadata.width, $0.metadata.height] } == alone.map { [$0.metadata.width, $0.metadata.height] })
        #expect(together.map(\.metadata.key) == alone.map(\.metadata.key))
    }

    @Test("the shared decode is skipped for one spec, upscaling, or a huge intermediate")
    func sharedDecodeBoxChoice() {
        let small = ThumbnailSpec(name: "a", width: 100, height: 100)
        let big = ThumbnailSpec(name: "b", width: 4_000, height: 4_000)
        #expect(ThumbnailRenderer.sharedDecodeBox([small], source: (3000, 2000)) == nil)
        #expect(ThumbnailRenderer.sharedDecodeBox([small, big], source: (3000, 2000)) == nil)
        #expect(ThumbnailRenderer.sharedDecodeBox([small, ThumbnailSpec(name: "c", width: 3_500, height: 3_500)], source: (6000, 6000)) == nil)
        #expect(ThumbnailRenderer.sharedDecodeBox([small, ThumbnailSpec(name: "g", width: 800, height: 800)], source: (3000, 2000))! == (800, 534))
    }

    @Test("a PNG with alpha becomes a 3-channel JPEG, flattened on white")
    func alphaFlattened() throws {
        let gradient = try renderer.render(Fixtures.png(width: 300, height: 200, alpha: true), spec: box)
        #expect(Fixtures.jpegComponents(gradient.bytes) == 3)
        #expect(gradient.metadata.width == 100 && gradient.metadata.height == 67)
        // Fully transparent must come out exactly as opaque white does, not as black.
        let transparent = try renderer.render(Fixtures.solidPNG(width: 40, height: 40, pixel: [0, 0, 0, 0]), spec: box)
        let white = try renderer.render(Fixtures.solidPNG(width: 40, height: 40, pixel: [255, 255, 255]), spec: box)
        let black = try renderer.render(Fixtures.solidPNG(width: 40, height: 40, pixel: [0, 0, 0]), spec: box)
        #expect(transparent.bytes == white.bytes)
        #expect(transparent.bytes != black.bytes)
    }

    @Test("no upscaling unless asked")
    func noUpscale() throws {
        let small = Fixtures.png(width: 40, height: 20)
        let thumb = try renderer.render(small, spec: box)
        #expect(thumb.metadata.width == 40 && thumb.metadata.height == 20)
        var up = box
        up.allowUpscale = true
        let bigger = try renderer.render(small, spec: up)
        #expect(bigger.metadata.width == 100 && bigger.metadata.height == 50)
    }
}

@Suite("Render: hostile input")
struct HostileInputTests {
    let renderer = ThumbnailRenderer()
    let box = ThumbnailSpec(name: "grid", width: 100, height: 100)

    func expectError(_ expected: (ThumbnailError) -> Bool, _ bytes: [UInt8], renderer: ThumbnailRenderer? = nil) {
        do {
            let thumb = try (renderer ?? self.renderer).render(bytes, spec: box)
            Issue.record("expected an error, got a \(thumb.metadata.width)x\(thumb.metadata.height) thumbnail")
        } catch {
            #expect(expected(error), "unexpected error: \(error)")
        }
    }

    @Test("a decompression bomb is refused from its header, at once")
    func bomb() {
        let bomb = Fixtures.pngBomb()
        #expect(bomb.count < 2_000)
        let start = ContinuousClock.now
        expectError({ if case .tooManyPixels(50_000, 50_000, 40_000_000) = $0 { true } else { false } }, bomb)
        // One measurement, so room for a loaded machine: decoding its 2.5 gigapixels takes far longer.
        #expect(ContinuousClock.now - start < .seconds(1))
    }

    @Test("the pixel limit is configurable and checked before decoding")
    func pixelLimit() {
        let limited = ThumbnailRenderer(limits: RenderLimits(maxPixels: 300 * 200 - 1))
        expectError({ if case .tooManyPixels(300, 200, _) = $0 { true } else { false } },
                    Fixtures.jpeg(width: 300, height: 200), renderer: limited)
    }

    @Test("input over the byte limit is refused without parsing")
    func byteLimit() {
        let limited = ThumbnailRenderer(limits: RenderLimits(maxInputBytes: 1_000))
        let bytes = [UInt8](repeating: 0xFF, count: 1_001)
        expectError({ $0 == .tooLarge(bytes: 1_001, limit: 1_000) }, bytes, renderer: limited)
    }

    @Test("the default byte limit is 20 MB")
    func defaultByteLimit() {
        #expect(RenderLimits().maxInputBytes == 20_000_000)
        #expect(RenderLimits().maxPixels == 40_000_000)
        expectError({ $0 == .tooLarge(bytes: 20_000_001, limit: 20_000_000) }, [UInt8](repeating: 0, count: 20_000_001))
    }

    @Test("a truncated JPEG is corrupt, not padded with grey")
    func truncatedJPEG() {
        let jpeg = Fixtures.jpeg(width: 300, height: 200)
        expectError({ if case .corrupt = $0 { true } else { false } }, Array(jpeg.prefix(jpeg.count / 2)))
    }

    @Test("a truncated PNG is corrupt")
    func truncatedPNG() {
        let png = Fixtures.png(width: 300, height: 200)
        expectError({ if case .corrupt = $0 { true } else { false } }, Array(png.prefix(png.count / 2)))
    }

    @Test("a JPEG with garbage after its header is corrupt")
    func corruptJPEG() {
        var jpeg = Fixtures.jpeg(width: 300, height: 200)
        // Keep the headers (first 700 bytes: SOI, JFIF, tables, SOF), overwrite the scan data.
        for i in 700..<(jpeg.count - 2) { jpeg[i] = UInt8(truncatingIfNeeded: i &* 31) }
        expectError({ if case .corrupt = $0 { true } else { false } }, jpeg)
    }

    @Test("a header-only image is corrupt")
    func headerOnly() {
        expectError({ if case .corrupt = $0 { true } else { false } }, [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10])
    }

    @Test("unknown bytes, text and formats outside the allow-list are unsupported")
    func unsupported() {
        expectError({ $0 == .unsupportedFormat(detected: nil) }, Array("just some text, not an image".utf8))
        expectError({ $0 == .unsupportedFormat(detected: nil) }, [UInt8](repeating: 7, count: 4096))
        // An SVG: libvips can load it, but librsvg is attack surface the stage does not need.
        let svg = Array(#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>"#.utf8)
        expectError({ if case .unsupportedFormat = $0 { true } else { false } }, svg)
        // PNG refused when the allow-list leaves it out.
        let jpegOnly = ThumbnailRenderer(limits: RenderLimits(allowedFormats: [.jpeg]))
        expectError({ $0 == .unsupportedFormat(detected: "VipsForeignLoadPngBuffer") },
                    Fixtures.png(width: 10, height: 10), renderer: jpegOnly)
    }

    @Test("empty input is corrupt")
    func empty() {
        expectError({ $0 == .corrupt(reason: "empty input") }, [])
    }

    @Test("invalid specs are refused with the field that is wrong")
    func invalidSpec() {
        let bad = ThumbnailSpec(name: "x", width: 0, height: 10)
        #expect(throws: ThumbnailError.self) { try renderer.render(Fixtures.png(width: 10, height: 10), spec: bad) }
        let badQuality = ThumbnailSpec(name: "x", width: 10, height: 10, quality: 101)
        #expect(throws: ThumbnailError.invalidSpec("quality 101 of \"x\" must be 1...100")) {
            try renderer.render(Fixtures.png(width: 10, height: 10), spec: badQuality)
        }
    }

    @Test("the time limit stops a render that runs too long", arguments: [1, 2])
    func timeLimit(specCount: Int) throws {
        // A 4000x4000 JPEG into a 3000x3000 box: too little shrink for JPEG shrink-on-load,
        // so libvips decodes all 16 MP and encodes 9 MP, some hundreds of milliseconds.
        // With a 20 ms budget the eval callback must kill it part way. Two specs take the
        // shared-decode path (the kill then lands in the in-memory decode).
        let big = Fixtures.encode(Fixtures.png(width: 400, height: 400), width: 4_000, height: 4_000, format: .jpeg, quality: 90, upscale: true)
        let specs = [ThumbnailSpec(name: "huge", width: 2_500, height: 2_500), ThumbnailSpec(name: "small", width: 100, height: 100)]
            .prefix(specCount)
        let limited = ThumbnailRenderer(limits: RenderLimits(timeLimit: .milliseconds(20)))
        let unlimited = ThumbnailRenderer()
        let clock = ContinuousClock()
        let full = try clock.measure { _ = try unlimited.render(big, specs: Array(specs)) }
        var caught: ThumbnailError?
        let killed = clock.measure {
            do { _ = try limited.render(big, specs: Array(specs)) } catch let error as ThumbnailError { caught = error } catch {}
        }
        #expect(caught == .timedOut(limit: .milliseconds(20)))
        // It stopped early rather than finishing and then reporting.
        #expect(killed < full / 2, "killed after \(killed), full render \(full)")
    }
}

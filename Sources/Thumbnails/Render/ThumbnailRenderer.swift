import CVips

/// The pure resize: source bytes and specs in, thumbnail bytes and metadata out.
///
/// Only the files in `Render/` call libvips, and this type does the image work. It reads no
/// configuration of its own (limits come in through ``RenderLimits``), keeps no
/// state between calls and touches no files or sockets; the one exception to "no clocks" is
/// the per-image time limit (see `shim.h`, `cvips_set_deadline`), which only decides whether
/// a render fails, never what it produces.
///
/// `render` blocks its thread on CPU-bound C code for tens of milliseconds or more: call it
/// from a ``RenderPool`` (or another thread you own), not directly from async code.
public struct ThumbnailRenderer: Sendable {
    /// Part of every output key: bump it when a change to the rendering (libvips options,
    /// colour handling, encoder settings) should give existing sources new keys.
    public static let renderVersion = "r1"

    public var limits: RenderLimits

    public init(limits: RenderLimits = RenderLimits()) {
        self.limits = limits
    }

    /// Renders `source` into one thumbnail per spec.
    ///
    /// Checks, in order and before any pixel is decoded: the specs, the byte limit, the
    /// format (magic bytes against ``RenderLimits/allowedFormats``), and the pixel limit
    /// from the header. Then the specs are rendered with libvips' shrink-on-load thumbnail,
    /// EXIF orientation applied, converted to sRGB, and encoded with all metadata stripped.
    /// With several specs the source is decoded once, to the size the largest one needs,
    /// and every spec is cut from that (see ``sharedDecodeBox(_:source:)``).
    ///
    /// - Throws: ``ThumbnailError`` describing what was wrong with the input or spec.
    public func render(_ source: [UInt8], specs: [ThumbnailSpec]) throws(ThumbnailError) -> RenderResult {
        for spec in specs { try spec.validate() }
        guard source.count <= limits.maxInputBytes else {
            throw .tooLarge(bytes: source.count, limit: limits.maxInputBytes)
        }
        guard !source.isEmpty else { throw .corrupt(reason: "empty input") }
        guard VipsRuntime.ensureInitialized() else {
            throw .encodeFailed(reason: "libvips failed to initialise")
        }
        do {
            return try source.withUnsafeBytes { raw in try self.render(raw, specs: specs) }
        } catch let error as ThumbnailError {
            throw error
        } catch {
            throw .corrupt(reason: "\(error)")  // unreachable: only ThumbnailError is thrown inside
        }
    }

    /// Renders `source` into one thumbnail for `spec`.
    public func render(_ source: [UInt8], spec: ThumbnailSpec) throws(ThumbnailError) -> Thumbnail {
        try render(source, specs: [spec]).thumbnails[0]
    }

    // MARK: - libvips

    /// `raw` is only valid inside this call: libvips images made from it are all released
    /// before returning (libvips does not copy the buffer).
    private func render(_ raw: UnsafeRawBufferPointer, specs: [ThumbnailSpec]) throws(ThumbnailError) -> RenderResult {
        guard let base = raw.baseAddress else { throw .corrupt(reason: "empty input") }
        let start = cvips_monotonic_us()
        let budgetMicros = Self.micros(limits.timeLimit)

        // 1. Format, from the magic bytes only.
        guard let loaderName = vips_foreign_find_load_buffer(base, raw.count) else {
            vips_error_clear()
            throw .unsupportedFormat(detected: nil)
        }
        let loader = String(cString: loaderName)
        guard let format = SourceFormat(vipsLoader: loader), limits.allowedFormats.contains(format) else {
            throw .unsupportedFormat(detected: loader)
        }

        // 2. Size, from the header only: libvips opens images lazily, so this reads no pixel
        //    data and a 50000x50000 PNG of a few kilobytes is refused in microseconds.
        let (width, height, orientation) = try Self.header(base, raw.count)
        let (pixels, overflow) = width.multipliedReportingOverflow(by: height)
        guard !overflow, pixels <= limits.maxPixels else {
            throw .tooManyPixels(width: width, height: height, limit: limits.maxPixels)
        }

        let sourceHash = ContentHash.sha256Hex(raw)
        let deadline = start + budgetMicros
        let upright = orientation >= 5 ? (width: height, height: width) : (width: width, height: height)
        let encoded: [(bytes: [UInt8], width: Int, height: Int)]
        if let box = Self.sharedDecodeBox(specs, source: upright) {
            encoded = try Self.renderShared(base, raw.count, specs: specs, box: box, deadline: deadline, limit: limits.timeLimit)
        } else {
            encoded = try specs.map { spec throws(ThumbnailError) in
                try Self.renderDirect(base, raw.count, spec: spec, deadline: deadline, limit: limits.timeLimit)
            }
        }

        var thumbnails: [Thumbnail] = []
        thumbnails.reserveCapacity(specs.count)
        for (spec, output) in zip(specs, encoded) {
            let metadata = ThumbnailMetadata(
                name: spec.name,
                format: spec.format,
                width: output.width,
                height: output.height,
                byteCount: output.bytes.count,
                contentHash: ContentHash.sha256Hex(output.bytes),
                key: ContentHash.sha256Hex(sourceHash + "|" + spec.fingerprint)
            )
            thumbnails.append(Thumbnail(bytes: output.bytes, metadata: metadata))
        }
        return RenderResult(
            sourceHash: sourceHash,
            sourceFormat: format,
            sourceWidth: width,
            sourceHeight: height,
            thumbnails: thumbnails
        )
    }

    /// Width, height and EXIF orientation from the header, without decoding pixels.
    private static func header(_ base: UnsafeRawPointer, _ count: Int) throws(ThumbnailError) -> (Int, Int, Int32) {
        var image: UnsafeMutablePointer<VipsImage>?
        guard cvips_header_from_buffer(base, count, &image) == 0, let image else {
            throw .corrupt(reason: VipsRuntime.takeError())
        }
        defer { g_object_unref(image) }
        let width = Int(vips_image_get_width(image))
        let height = Int(vips_image_get_height(image))
        guard width > 0, height > 0 else { throw .corrupt(reason: "header declares \(width)x\(height)") }
        return (width, height, cvips_orientation(image))
    }

    // MARK: Decoding once for several sizes

    /// Largest intermediate image decoded for sharing, in pixels (about 24 MB as 8-bit RGB).
    static let maxSharedPixels = 8_000_000

    /// With several specs, decoding the source once is the main saving (entropy decoding a
    /// JPEG costs the same whatever the shrink-on-load factor). This returns the smallest
    /// box that every spec can be cut from without upscaling, or nil to render each spec
    /// straight from the source: one spec, a spec that needs the full size or more, or an
    /// intermediate too large to hold in memory.
    ///
    /// The key of a thumbnail depends only on its source and spec; its bytes depend on the
    /// other configured sizes too (they set the intermediate's size), so changing the set of
    /// sizes can change bytes under an unchanged key.
    static func sharedDecodeBox(_ specs: [ThumbnailSpec], source: (width: Int, height: Int)) -> (width: Int, height: Int)? {
        guard specs.count > 1 else { return nil }
        let w = Double(source.width)
        let h = Double(source.height)
        var needed = 0.0
        for spec in specs {
            let sx = Double(spec.width) / w
            let sy = Double(spec.height) / h
            var scale = spec.mode == .fit ? min(sx, sy) : max(sx, sy)
            if !spec.allowUpscale { scale = min(scale, 1) }
            needed = max(needed, scale)
        }
        guard needed < 1 else { return nil }
        // Round up (with a little slack for floating point) so no spec is short of a pixel.
        let box = (width: Int((w * needed - 1e-6).rounded(.up)), height: Int((h * needed - 1e-6).rounded(.up)))
        guard box.width * box.height <= maxSharedPixels else { return nil }
        return box
    }

    /// Decodes once to `box` (shrink-on-load, auto-rotated), holds that in memory, and cuts
    /// every spec from it.
    private static func renderShared(
        _ base: UnsafeRawPointer, _ count: Int, specs: [ThumbnailSpec], box: (width: Int, height: Int),
        deadline: Int, limit: Duration
    ) throws(ThumbnailError) -> [(bytes: [UInt8], width: Int, height: Int)] {
        var decoded: UnsafeMutablePointer<VipsImage>?
        guard cvips_thumbnail_buffer(
            base, count, &decoded, Int32(box.width), Int32(box.height), VIPS_SIZE_DOWN, VIPS_INTERESTING_NONE
        ) == 0, let decoded else {
            throw .corrupt(reason: VipsRuntime.takeError())
        }
        defer { g_object_unref(decoded) }

        // Decoding happens here: arm the time limit first.
        let remaining = deadline - cvips_monotonic_us()
        guard remaining > 0 else { throw .timedOut(limit: limit) }
        cvips_set_deadline(decoded, remaining)
        guard let memory = vips_image_copy_memory(decoded) else {
            let reason = VipsRuntime.takeError()
            if cvips_monotonic_us() >= deadline { throw .timedOut(limit: limit) }
            throw .corrupt(reason: reason)
        }
        defer { g_object_unref(memory) }

        return try specs.map { spec throws(ThumbnailError) in
            var thumb: UnsafeMutablePointer<VipsImage>?
            guard cvips_thumbnail_image(
                memory, &thumb, Int32(spec.width), Int32(spec.height), Self.size(spec), Self.crop(spec)
            ) == 0, let thumb else {
                throw .corrupt(reason: VipsRuntime.takeError())
            }
            defer { g_object_unref(thumb) }
            return try encode(thumb, spec: spec, deadline: deadline, limit: limit)
        }
    }

    // MARK: One spec straight from the source

    private static func renderDirect(
        _ base: UnsafeRawPointer, _ count: Int, spec: ThumbnailSpec, deadline: Int, limit: Duration
    ) throws(ThumbnailError) -> (bytes: [UInt8], width: Int, height: Int) {
        var thumb: UnsafeMutablePointer<VipsImage>?
        guard cvips_thumbnail_buffer(
            base, count, &thumb, Int32(spec.width), Int32(spec.height), size(spec), crop(spec)
        ) == 0, let thumb else {
            throw .corrupt(reason: VipsRuntime.takeError())
        }
        defer { g_object_unref(thumb) }
        return try encode(thumb, spec: spec, deadline: deadline, limit: limit)
    }

    private static func size(_ spec: ThumbnailSpec) -> VipsSize {
        spec.allowUpscale ? VIPS_SIZE_BOTH : VIPS_SIZE_DOWN
    }

    private static func crop(_ spec: ThumbnailSpec) -> VipsInteresting {
        spec.mode == .cover ? VIPS_INTERESTING_CENTRE : VIPS_INTERESTING_NONE
    }

    // MARK: Encoding

    /// 8-bit sRGB → (JPEG: flatten alpha on white) → metadata removed → encode.
    /// libvips is lazy, so decode errors and the time limit both surface in the save call.
    private static func encode(
        _ image: UnsafeMutablePointer<VipsImage>, spec: ThumbnailSpec, deadline: Int, limit: Duration
    ) throws(ThumbnailError) -> (bytes: [UInt8], width: Int, height: Int) {
        // Every image reference made below is owned by this array and released on return.
        var owned: [UnsafeMutablePointer<VipsImage>] = []
        defer { for image in owned { g_object_unref(image) } }
        var current = image

        if vips_image_get_format(current) != VIPS_FORMAT_UCHAR {
            var converted: UnsafeMutablePointer<VipsImage>?
            guard cvips_to_srgb(current, &converted) == 0, let converted else {
                throw .corrupt(reason: VipsRuntime.takeError())
            }
            owned.append(converted)
            current = converted
        }
        if spec.format == .jpeg, vips_image_hasalpha(current) != 0 {
            var flat: UnsafeMutablePointer<VipsImage>?
            guard cvips_flatten_white(current, &flat) == 0, let flat else {
                throw .corrupt(reason: VipsRuntime.takeError())
            }
            owned.append(flat)
            current = flat
        }
        var stripped: UnsafeMutablePointer<VipsImage>?
        guard cvips_copy_without_metadata(current, &stripped) == 0, let stripped else {
            throw .encodeFailed(reason: VipsRuntime.takeError())
        }
        owned.append(stripped)
        current = stripped

        let remaining = deadline - cvips_monotonic_us()
        guard remaining > 0 else { throw .timedOut(limit: limit) }
        cvips_set_deadline(current, remaining)

        var buffer: UnsafeMutableRawPointer?
        var length = 0
        let saved: Int32 =
            switch spec.format {
            case .jpeg: cvips_jpegsave_buffer(current, &buffer, &length, Int32(spec.quality))
            case .webp: cvips_webpsave_buffer(current, &buffer, &length, Int32(spec.quality))
            }
        guard saved == 0, let buffer else {
            let reason = VipsRuntime.takeError()
            if cvips_monotonic_us() >= deadline { throw .timedOut(limit: limit) }
            throw .corrupt(reason: reason)
        }
        // libvips hands over a g_malloc'd buffer: copy it into Swift memory and free it.
        defer { g_free(buffer) }
        var bytes = [UInt8](UnsafeRawBufferPointer(start: buffer, count: length))
        if spec.format == .webp { bytes = WebPMetadata.strip(bytes) }
        return (bytes, Int(vips_image_get_width(current)), Int(vips_image_get_height(current)))
    }

    private static func micros(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return Int(seconds * 1_000_000 + attoseconds / 1_000_000_000_000)
    }
}

extension SourceFormat {
    /// Maps libvips' loader class names (from `vips_foreign_find_load_buffer`) to formats.
    init?(vipsLoader: String) {
        switch vipsLoader {
        case "VipsForeignLoadJpegBuffer": self = .jpeg
        case "VipsForeignLoadPngBuffer", "VipsForeignLoadSpngBuffer": self = .png
        case "VipsForeignLoadWebpBuffer": self = .webp
        case "VipsForeignLoadNsgifBuffer", "VipsForeignLoadGifBuffer": self = .gif
        case "VipsForeignLoadHeifBuffer": self = .heif
        default: return nil
        }
    }
}

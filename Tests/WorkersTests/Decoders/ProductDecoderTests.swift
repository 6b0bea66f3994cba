import Foundation
import Testing
import Workers

@Suite struct ProductDecoderTests {
    let decoder = ProductDecoder()
    /// 2022-01-04T00:00:00 in Korea.
    let jan4KST: Int64 = 1_641_222_000_000

    @Test func oldEraSnakeCasePageYieldsOneProductPerEntry() throws {
        let products = try decoder.decode(Fixtures.bytes(Fixtures.productPageOld))
        #expect(products.map(\.id) == [15, 16])
        #expect(products[0] == Product(
            id: 15, vendorId: 3, name: "MacBook Pro", thumbnail: "https://img.example.com/p/15/thumb", currency: .krw,
            price: 1_690_000, stock: 5, createdAt: jan4KST, issuedAt: jan4KST))
        // 1.23123123E8 is a price; the upstream bargain price is wrong by 0 here (123123123 - 100).
        #expect(products[1].price == 123_123_123)
        #expect(products[1].currency == .usd)
        #expect(products[1].bargainPrice == 123_123_023)
        #expect(products[1].bargainPriceCorrected == false)
    }

    @Test func newEraCamelCasePageWithVendorName() throws {
        let products = try decoder.decode(Fixtures.bytes(Fixtures.productPageNew))
        let p = try #require(products.first)
        #expect(products.count == 1)
        #expect(p.vendorName == "wongbing")
        #expect(p.description == "detail")
        #expect(p.price == 2000)
        #expect(p.bargainPrice == 1500)
        // No fraction digits: 2022-10-18T00:00:00 KST.
        #expect(p.createdAt == 1_666_018_800_000)
        #expect(p.thumbnail.hasSuffix("/abc"))
    }

    @Test func detailWithImagesAndVendorsObject() throws {
        let p = try #require(try decoder.decode(Fixtures.bytes(Fixtures.productDetail)).first)
        #expect(p.vendorName == "keyboard-shop")
        #expect(p.images == [
            Product.Image(id: 1, url: "https://img.example.com/o/1.jpg", thumbnailURL: "https://img.example.com/t/1.jpg", issuedAt: jan4KST),
            Product.Image(id: 2, url: "https://img.example.com/o/2", thumbnailURL: "https://img.example.com/t/2", issuedAt: jan4KST),
        ])
        #expect(try decoder.decode(p.jsonBytes()) == [p])
    }

    @Test func bargainPriceIsRecomputedNotTrusted() throws {
        let text = Fixtures.productDetail.replacingOccurrences(of: #""bargain_price":45000"#, with: #""bargain_price":44000"#)
        let p = try #require(try decoder.decode(Fixtures.bytes(text)).first)
        #expect(p.bargainPrice == 45000)
        #expect(p.bargainPriceCorrected)
    }

    @Test func emptyPageYieldsNothing() throws {
        #expect(try decoder.decode(Fixtures.bytes(#"{"pageNo":3,"pages":[],"hasNext":false}"#)).isEmpty)
    }

    @Test(arguments: [
        (#""price":50000"#, #""price":-1"#, "price", DecodeFailure.Reason.invalidValue),
        (#""discounted_price":5000"#, #""discounted_price":60000"#, "discounted_price", .invalidValue),
        (#""currency":"KRW""#, #""currency":"EUR""#, "currency", .invalidValue),
        (#""currency":"KRW""#, #""currency":7"#, "currency", .wrongType),
        (#""stock":3"#, #""stock":-3"#, "stock", .invalidValue),
        (#""stock":3"#, #""stock":3.5"#, "stock", .wrongType),
        (#""id":522,"#, "", "id", .missingField),
        (#""name":"Keyboard""#, #""name":"""#, "name", .missingField),
        (#""created_at":"2022-01-04T00:00:00.00""#, #""created_at":"yesterday""#, "created_at", .invalidValue),
        (#""url":"https://img.example.com/o/2""#, #""url":null"#, "images[1].url", .missingField),
        (#""vendors":{"id":6,"name":"keyboard-shop""#, #""vendors":{"id":6,"name":5"#, "vendors.name", .wrongType),
    ])
    func invalidProductsFailNamingTheField(_ from: String, _ to: String, _ field: String, _ reason: DecodeFailure.Reason) {
        let text = Fixtures.productDetail.replacingOccurrences(of: from, with: to)
        #expect(text != Fixtures.productDetail)
        let failure = expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(text)) }
        #expect(failure?.field == field, "\(String(describing: failure))")
        #expect(failure?.reason == reason, "\(String(describing: failure))")
    }

    @Test func moreThanFiveImagesIsAFailure() {
        let image = #"{"id":1,"url":"https://img.example.com/o/1.jpg"}"#
        let six = "[" + Array(repeating: image, count: 6).joined(separator: ",") + "]"
        let text = Fixtures.productDetail.replacingOccurrences(
            of: #""images":[{"#, with: #""images":\#(six),"x":[{"#)
        let failure = expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(text)) }
        #expect(failure?.field == "images")
        #expect(failure?.reason == .invalidValue)
    }

    @Test func aBadProductInAPageNamesItsIndex() {
        let text = Fixtures.productPageOld.replacingOccurrences(of: #""currency":"USD""#, with: #""currency":"JPY""#)
        let failure = expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(text)) }
        #expect(failure?.field == "pages[1].currency")
    }

    /// A product keeps its text in one buffer with its images (``TextBuffer``): what it gives back
    /// is what was sent, escapes decoded; products of one page share the page's buffer without
    /// seeing each other's text; changing a decoded product's text changes nothing else.
    @Test func keptTextReadsBackAndStaysApart() throws {
        let page = #"""
            {"pageNo":1,"pages":[
             {"id":1,"vendor_id":2,"vendorName":"v\u00e9ndor","name":"Caf\u00e9 \"A\" 한글","description":"tab\there","thumbnail":"https://t/1","currency":"KRW","price":10,"stock":1,"created_at":"2022-01-04T00:00:00","issued_at":"2022-01-04T00:00:00",
              "images":[{"id":7,"url":"https://o/7","thumbnail_url":"https://t/7\/x"},{"id":8,"url":"https://o/8"}]},
             {"id":2,"vendor_id":2,"vendors":{"name":"shop"},"name":"Second","thumbnail":"https://t/2","currency":"USD","price":1,"stock":0,"created_at":"2022-01-04T00:00:00","issued_at":"2022-01-05T00:00:00"}
            ]}
            """#
        var products = try decoder.decode(Array(page.utf8))
        #expect(products.count == 2)
        let built = Product(
            id: 1, vendorId: 2, vendorName: "véndor", name: "Café \"A\" 한글", description: "tab\there", thumbnail: "https://t/1",
            currency: .krw, price: 10, stock: 1, createdAt: jan4KST, issuedAt: jan4KST,
            images: [
                Product.Image(id: 7, url: "https://o/7", thumbnailURL: "https://t/7/x"),
                Product.Image(id: 8, url: "https://o/8"),
            ])
        #expect(products[0] == built)
        #expect(products[0].hashValue == built.hashValue)
        #expect(products[1].vendorName == "shop")
        #expect(products[1].name == "Second")
        #expect(products[1].description == nil)
        #expect(products[1].images.isEmpty)
        // Written out and read back: the same product.
        #expect(try decoder.decode(products[0].jsonBytes()) == [products[0]])
        let coded = try JSONDecoder().decode(Product.self, from: JSONEncoder().encode(products[0]))
        #expect(coded == products[0])
        // Changing one product's text: the other product, the images and a copy keep theirs.
        let copy = products[0]
        products[0].name = "Renamed"
        products[0].images[0].url = "https://o/changed"
        products[0].description = nil
        #expect(products[0].name == "Renamed")
        #expect(products[0].images[0].url == "https://o/changed")
        #expect(products[0].images[0].thumbnailURL == "https://t/7/x")
        #expect(products[0].description == nil)
        #expect(copy == built)
        #expect(products[1].name == "Second")
        #expect(products[0] != built)
    }
}

#!/usr/bin/env python3
"""Second peer for decode-bench: the ticker and product streams decoded and validated by msgspec,
the fastest typed JSON decoder with validation in Python (written in C).

    python3 peer_msgspec.py DIR [SECONDS [STREAM]]

Same protocol as peer_pydantic.py: reads DIR/<stream>.jsonl written by `decode-bench generate`,
decodes every message with a `msgspec.json.Decoder` of the stream's type, repeatedly for about
SECONDS per repetition, 5 repetitions, and prints the best:
    stream  messages  bytes  msgs/s  MB/s  failures

The types declare the same fields and checks as the Swift decoders (PriceTickDecoder,
ProductDecoder) and peer_pydantic.py: required fields, positive trade price, non-negative prices
and volumes, enum values, the market-code pattern and length, low not above high; for products
non-negative prices and stock, at most 5 images with a non-empty URL, dates, discounted price not
above price. msgspec has no alias choices, so the SIMPLE format (short keys) gets its own type,
renamed field by field: each stream decodes with the type of its format, which can only make
msgspec faster than a decoder that accepts both. Unknown keys are skipped (msgspec's default).
Streams other than ticker-default, ticker-simple and product-detail are not covered here.
"""
from datetime import datetime
from typing import Annotated, Literal, Optional

import msgspec

import peer_timing

NonNeg = Annotated[float, msgspec.Meta(ge=0)]
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
Market = Annotated[str, msgspec.Meta(pattern=r"^[A-Z0-9]+-[A-Z0-9]+$", max_length=32)]
Positive = Annotated[float, msgspec.Meta(gt=0)]
Millis = Annotated[int, msgspec.Meta(gt=0)]
NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class TickerChecks(msgspec.Struct):
    def __post_init__(self):
        if self.low_price is not None and self.high_price is not None and self.low_price > self.high_price:
            raise ValueError("low_price above high_price")


# One field list for both formats (msgspec applies `rename` only to a class's own fields).
TICKER_FIELDS = [
    ("code", Market),
    ("trade_price", Positive),
    ("signed_change_rate", float),
    ("trade_volume", NonNeg),
    ("trade_timestamp", Millis),
    ("type", Optional[Literal["ticker"]], None),
    ("opening_price", Optional[NonNeg], None),
    ("high_price", Optional[NonNeg], None),
    ("low_price", Optional[NonNeg], None),
    ("prev_closing_price", Optional[NonNeg], None),
    ("change", Optional[Literal["RISE", "EVEN", "FALL"]], None),
    ("signed_change_price", Optional[float], None),
    ("acc_trade_volume_24h", Optional[NonNeg], None),
    ("acc_trade_price_24h", Optional[NonNeg], None),
    ("timestamp", Optional[int], None),
    ("ask_bid", Optional[Literal["ASK", "BID"]], None),
    ("stream_type", Optional[Literal["SNAPSHOT", "REALTIME"]], None),
    ("is_trading_suspended", Optional[bool], None),
]

SIMPLE_NAMES = {
    "code": "cd", "trade_price": "tp", "signed_change_rate": "scr", "trade_volume": "tv", "trade_timestamp": "ttms",
    "type": "ty", "opening_price": "op", "high_price": "hp", "low_price": "lp", "prev_closing_price": "pcp",
    "change": "c", "signed_change_price": "scp", "acc_trade_volume_24h": "atv24h", "acc_trade_price_24h": "atp24h",
    "timestamp": "tms", "ask_bid": "ab", "stream_type": "st", "is_trading_suspended": "its",
}

TickerDefault = msgspec.defstruct("TickerDefault", TICKER_FIELDS, bases=(TickerChecks,))
TickerSimple = msgspec.defstruct("TickerSimple", TICKER_FIELDS, bases=(TickerChecks,), rename=SIMPLE_NAMES)


class ProductImage(msgspec.Struct):
    id: int
    url: NonEmpty
    thumbnail_url: Optional[str] = None
    issued_at: Optional[datetime] = None


class Vendors(msgspec.Struct):
    name: Optional[str] = None


class Product(msgspec.Struct):
    id: int
    vendor_id: int
    name: NonEmpty
    thumbnail: NonEmpty
    currency: Literal["KRW", "USD"]
    price: NonNeg
    stock: NonNegInt
    created_at: datetime
    issued_at: datetime
    vendorName: Optional[str] = None
    description: Optional[str] = None
    bargain_price: Optional[NonNeg] = None
    discounted_price: Optional[NonNeg] = None
    images: Annotated[list[ProductImage], msgspec.Meta(max_length=5)] = []
    vendors: Optional[Vendors] = None

    def __post_init__(self):
        if (self.discounted_price or 0) > self.price:
            raise ValueError("discounted_price above price")


DECODERS = {
    "ticker-default": msgspec.json.Decoder(TickerDefault).decode,
    "ticker-simple": msgspec.json.Decoder(TickerSimple).decode,
    "product-detail": msgspec.json.Decoder(Product).decode,
}


if __name__ == "__main__":
    peer_timing.main(DECODERS, (msgspec.ValidationError, msgspec.DecodeError, ValueError))

#!/usr/bin/env python3
"""Peer for decode-bench: the same streams decoded and validated by pydantic v2.

    python3 peer_pydantic.py DIR [SECONDS [STREAM]]

Reads DIR/<stream>.jsonl written by `decode-bench generate`, and for each stream runs
`model_validate_json` (or a TypeAdapter's `validate_json` for arrays) on every message,
repeatedly for about SECONDS per repetition, 5 repetitions; prints the best like
decode-bench does:  stream  messages  bytes  msgs/s  MB/s  failures

The models declare the same fields and checks as the Swift decoders (PriceTickDecoder,
ProductDecoder, CampaignDecoder, HangoutDecoder, ChallengeDecoder): required fields, non-negative
prices, enum values, the DEFAULT/SIMPLE/REST key aliases, at most 5 images, discounted price not
above price, end date not before start date; for hangouts the envelope, the zone-less meet time,
the category set, coordinates in range, current count not above the limit and the parallel user
and image arrays of equal length; for spending records non-negative integer costs, http(s) image
URLs and both date formats. Unknown keys are ignored (pydantic's default, extra="ignore").
"""
from datetime import date, datetime
from typing import Annotated, Literal, Optional

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

import peer_timing

NonNeg = Annotated[float, Field(ge=0)]
NonNegInt = Annotated[int, Field(ge=0)]


def alias(*names):
    return Field(validation_alias=AliasChoices(*names))


def alias_opt(*names):
    return Field(default=None, validation_alias=AliasChoices(*names))


class PriceTick(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Optional[Literal["ticker"]] = alias_opt("type", "ty")
    market: Annotated[str, Field(pattern=r"^[A-Z0-9]+-[A-Z0-9]+$", max_length=32)] = alias("code", "cd", "market")
    trade_price: Annotated[float, Field(gt=0)] = alias("trade_price", "tp")
    opening_price: Optional[NonNeg] = alias_opt("opening_price", "op")
    high_price: Optional[NonNeg] = alias_opt("high_price", "hp")
    low_price: Optional[NonNeg] = alias_opt("low_price", "lp")
    prev_closing_price: Optional[NonNeg] = alias_opt("prev_closing_price", "pcp")
    change: Optional[Literal["RISE", "EVEN", "FALL"]] = alias_opt("change", "c")
    signed_change_price: Optional[float] = alias_opt("signed_change_price", "scp")
    signed_change_rate: float = alias("signed_change_rate", "scr")
    trade_volume: NonNeg = alias("trade_volume", "tv")
    acc_trade_volume_24h: Optional[NonNeg] = alias_opt("acc_trade_volume_24h", "atv24h")
    acc_trade_price_24h: Optional[NonNeg] = alias_opt("acc_trade_price_24h", "atp24h")
    trade_timestamp: Annotated[int, Field(gt=0)] = alias("trade_timestamp", "ttms")
    timestamp: Optional[int] = alias_opt("timestamp", "tms")
    ask_bid: Optional[Literal["ASK", "BID"]] = alias_opt("ask_bid", "ab")
    stream_type: Optional[Literal["SNAPSHOT", "REALTIME"]] = alias_opt("stream_type", "st")
    is_trading_suspended: Optional[bool] = alias_opt("is_trading_suspended", "its")

    @model_validator(mode="after")
    def low_not_above_high(self):
        if self.low_price is not None and self.high_price is not None and self.low_price > self.high_price:
            raise ValueError("low_price above high_price")
        return self


class ProductImage(BaseModel):
    id: int
    url: Annotated[str, Field(min_length=1)]
    thumbnail_url: Optional[str] = None
    issued_at: Optional[datetime] = None


class Vendors(BaseModel):
    name: Optional[str] = None


class Product(BaseModel):
    id: int
    vendor_id: int
    vendorName: Optional[str] = None
    name: Annotated[str, Field(min_length=1)]
    description: Optional[str] = None
    thumbnail: Annotated[str, Field(min_length=1)]
    currency: Literal["KRW", "USD"]
    price: NonNeg
    bargain_price: Optional[NonNeg] = None
    discounted_price: Optional[NonNeg] = None
    stock: NonNegInt
    created_at: datetime
    issued_at: datetime
    images: Annotated[list[ProductImage], Field(max_length=5)] = []
    vendors: Optional[Vendors] = None

    @model_validator(mode="after")
    def discount_not_above_price(self):
        if (self.discounted_price or 0) > self.price:
            raise ValueError("discounted_price above price")
        return self


class Organization(BaseModel):
    id: int


class Promoter(BaseModel):
    name: Optional[str] = None


class My(BaseModel):
    donatedSteps: Optional[NonNegInt] = None
    ranking: Optional[int] = None
    lastDonatedDateTime: Optional[datetime] = None
    story: Optional[object] = None


class Campaign(BaseModel):
    id: int
    name: Annotated[str, Field(min_length=1)]
    status: Literal["START", "END"]
    ratio: NonNegInt
    donatedSteps: Optional[NonNegInt] = None
    goalPoint: Optional[NonNegInt] = None
    participantCount: Optional[NonNegInt] = None
    startDate: datetime
    endDate: datetime
    categoryId: int
    organizations: Optional[list[Organization]] = None
    campaignPromoter: Optional[Promoter] = None
    my: Optional[My] = None
    smallListThumbnailImagePath: Optional[str] = None
    mediumListThumbnailImagePath: Optional[str] = None
    detailThumbnailImagePath: Optional[str] = None

    @model_validator(mode="after")
    def end_not_before_start(self):
        if self.endDate < self.startDate:
            raise ValueError("endDate before startDate")
        return self


CampaignList = TypeAdapter(list[Campaign])


HangoutCategory = Literal[
    "Travel", "Eat out", "Cafe", "Cooking", "Vegan", "Bar", "Language Practice", "Discussion", "Dance", "K-POP",
    "Study", "Read", "Instruments", "Draw", "Movie", "Exhibition", "Museum", "Festival", "Concerts", "Party",
    "Picnic", "Boardgame", "Sports", "Volunteer", "Projcets", "Projects", "Career",
]


class Place(BaseModel):
    placeName: Annotated[str, Field(min_length=1)]
    placeAddress: Optional[str] = None
    placeLatitude: Annotated[float, Field(ge=-90, le=90)]
    placeLongitude: Annotated[float, Field(ge=-180, le=180)]


class Hangout(BaseModel):
    hangoutInfoId: Annotated[str, Field(min_length=1)]
    hangoutTitle: Annotated[str, Field(min_length=1)]
    hangoutPlan: str
    hangoutMeetTime: datetime
    hangoutLanguage: Annotated[str, Field(min_length=1)]
    hangoutCategory: list[HangoutCategory] = []
    hangoutOpenChat: Optional[str] = None
    hangoutTotalNum: Annotated[int, Field(ge=1)]
    hangoutCurrentNum: Optional[NonNegInt] = None
    hangoutLikeCount: Optional[NonNegInt] = None
    hangoutImageUrl: Optional[str] = None
    place: Place
    hangoutJoinUserId: list[str] = []
    hangoutJoinUserImageUrl: Optional[list[Optional[str]]] = None
    hangoutLikeUserId: list[str] = []
    hangoutLikeUserImageUrl: Optional[list[Optional[str]]] = None
    hangoutStatus: Optional[str] = None

    @field_validator("hangoutMeetTime", mode="before")
    @classmethod
    def zoneless_minutes(cls, v):
        # `yyyy-MM-dd HH:mm`, local time without a zone (the Swift decoder applies the offset).
        return datetime.strptime(v, "%Y-%m-%d %H:%M") if isinstance(v, str) and len(v) == 16 else v

    @model_validator(mode="after")
    def consistent(self):
        for ids, images in ((self.hangoutJoinUserId, self.hangoutJoinUserImageUrl),
                            (self.hangoutLikeUserId, self.hangoutLikeUserImageUrl)):
            if images is not None and len(images) != len(ids):
                raise ValueError("parallel arrays differ in length")
        current = self.hangoutCurrentNum if self.hangoutCurrentNum is not None else len(self.hangoutJoinUserId)
        if current > self.hangoutTotalNum:
            raise ValueError("current count above the limit")
        return self


class HangoutEnvelope(BaseModel):
    status: str
    message: str
    data: Hangout


class HangoutPageData(BaseModel):
    HangoutList: list[Hangout]


class HangoutPageEnvelope(BaseModel):
    status: str
    message: str
    data: HangoutPageData


HttpURL = Annotated[str, Field(pattern=r"^https?://")]


class SpendingRecord(BaseModel):
    recordId: int
    challengeId: int
    userId: int
    title: str
    content: Optional[str] = None
    cost: NonNegInt
    image: list[HttpURL] = Field(default=[], validation_alias=AliasChoices("image", "image[]"))
    date: date
    hide: bool = False

    @field_validator("date", mode="before")
    @classmethod
    def both_formats(cls, v):
        # Spring's `yyyy-MM-dd`, or the iOS client's `yy.MM.dd`.
        return datetime.strptime(v, "%y.%m.%d").date() if isinstance(v, str) and len(v) == 8 else v

VALIDATORS = {
    "ticker-default": PriceTick.model_validate_json,
    "ticker-simple": PriceTick.model_validate_json,
    "product-detail": Product.model_validate_json,
    "campaign-list5": CampaignList.validate_json,
    "hangout-detail": HangoutEnvelope.model_validate_json,
    "hangout-page5": HangoutPageEnvelope.model_validate_json,
    "challenge-record": SpendingRecord.model_validate_json,
}


if __name__ == "__main__":
    peer_timing.main(VALIDATORS, ValueError)  # pydantic.ValidationError is a ValueError

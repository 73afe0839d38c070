// The .proto files a registry schema may import without a reference: the ones Confluent's Protobuf
// serializers treat as built in (the well-known types, google/type/*, Confluent's decimal and meta).
// Invariant: each is the generated descriptor of the Go package that owns it, under the import
// path schemas use, so a schema that imports one compiles as its producer's serializer compiled it.

package format

import (
	"fmt"

	"github.com/bufbuild/protocompile"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/confluent"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/confluent/types"
	"google.golang.org/genproto/googleapis/type/calendarperiod"
	"google.golang.org/genproto/googleapis/type/color"
	"google.golang.org/genproto/googleapis/type/date"
	"google.golang.org/genproto/googleapis/type/datetime"
	"google.golang.org/genproto/googleapis/type/dayofweek"
	gdecimal "google.golang.org/genproto/googleapis/type/decimal"
	"google.golang.org/genproto/googleapis/type/expr"
	"google.golang.org/genproto/googleapis/type/fraction"
	"google.golang.org/genproto/googleapis/type/latlng"
	gmoney "google.golang.org/genproto/googleapis/type/money"
	"google.golang.org/genproto/googleapis/type/month"
	"google.golang.org/genproto/googleapis/type/postaladdress"
	"google.golang.org/genproto/googleapis/type/quaternion"
	"google.golang.org/genproto/googleapis/type/timeofday"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// builtinImports are those files by import path (protocompile's standard imports add the
// google/protobuf/* well-known types). Confluent's decimal is generated as confluent/types/ but
// imported as confluent/type/.
var builtinImports = map[string]protoreflect.FileDescriptor{
	"confluent/meta.proto":              confluent.File_confluent_meta_proto,
	"confluent/type/decimal.proto":      types.File_confluent_types_decimal_proto,
	"google/type/calendar_period.proto": calendarperiod.File_google_type_calendar_period_proto,
	"google/type/color.proto":           color.File_google_type_color_proto,
	"google/type/date.proto":            date.File_google_type_date_proto,
	"google/type/datetime.proto":        datetime.File_google_type_datetime_proto,
	"google/type/dayofweek.proto":       dayofweek.File_google_type_dayofweek_proto,
	"google/type/decimal.proto":         gdecimal.File_google_type_decimal_proto,
	"google/type/expr.proto":            expr.File_google_type_expr_proto,
	"google/type/fraction.proto":        fraction.File_google_type_fraction_proto,
	"google/type/latlng.proto":          latlng.File_google_type_latlng_proto,
	"google/type/money.proto":           gmoney.File_google_type_money_proto,
	"google/type/month.proto":           month.File_google_type_month_proto,
	"google/type/postal_address.proto":  postaladdress.File_google_type_postal_address_proto,
	"google/type/quaternion.proto":      quaternion.File_google_type_quaternion_proto,
	"google/type/timeofday.proto":       timeofday.File_google_type_timeofday_proto,
}

// builtinResolver finds the built-in imports (a file under its import path, which for Confluent's
// decimal is not the path it was generated under: hence a renamed descriptor proto, not the
// descriptor itself).
var builtinResolver = protocompile.ResolverFunc(func(path string) (protocompile.SearchResult, error) {
	fd, ok := builtinImports[path]
	if !ok {
		return protocompile.SearchResult{}, protoregistryNotFound(path)
	}
	p := protodesc.ToFileDescriptorProto(fd)
	p.Name = &path
	return protocompile.SearchResult{Proto: p}, nil
})

// protoregistryNotFound is a resolver's "no such file", which lets a composite resolver go on.
func protoregistryNotFound(path string) error {
	return fmt.Errorf("%s: %w", path, protoregistry.NotFound)
}

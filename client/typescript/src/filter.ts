/**
 * Filters on memory entries, written as plain objects (the same shape the Python client reads):
 *
 *   { topic: "food" }                              metadata `topic` equals "food"
 *   { "place.city": "Lisbon" }                     nested keys, dotted ("metadata." may lead)
 *   { rating: { gte: 3, lt: 5 } }                  a numeric range
 *   { lang: { in: ["en", "pt"] } }                 one of several values
 *   { tags: { contains: "work" } }                 a list holding a value
 *   { city: { exists: true } }                     the key is present
 *   { create_time: { gte: new Date("2026-01-01") } }   entry times: create_time, update_time, expire_time
 *   { any: [{ topic: "food" }, { topic: "travel" }] }, { not: { topic: "work" } }
 *
 * Several keys in one object must all hold. `filterMessage` turns one into the protos' `Filter`.
 */
import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ListValueSchema, timestampFromDate, ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  BoundSchema,
  FilterSchema,
  RangeSchema,
  type Bound,
  type FieldFilter,
  type Filter,
} from "./gen/contextfold/v1/memory_pb.js";

type Scalar = string | number | boolean | null;

/** Tests on one field; several together must all hold. */
export interface FieldTests {
  eq?: Scalar;
  in?: Scalar[];
  contains?: Scalar;
  gt?: number | Date;
  gte?: number | Date;
  lt?: number | Date;
  lte?: number | Date;
  exists?: boolean;
}

/** A filter as an object: field names to a value (equality) or to `FieldTests`; `all`, `any`, `not` combine. */
export type FilterData = {
  all?: FilterData[];
  any?: FilterData[];
  not?: FilterData;
} & { [field: string]: Scalar | FieldTests | FilterData[] | FilterData | undefined };

const TESTS = new Set(["eq", "in", "contains", "gt", "gte", "lt", "lte", "exists"]);
const TIMES = new Set(["create_time", "update_time", "expire_time"]);
const BOUNDS = ["gt", "gte", "lt", "lte"] as const;

function isTests(value: unknown): value is FieldTests {
  if (value === null || typeof value !== "object" || Array.isArray(value) || value instanceof Date) return false;
  const keys = Object.keys(value);
  return keys.length > 0 && keys.every((key) => TESTS.has(key));
}

function scalar(value: unknown): JsonValue {
  if (value === null || ["string", "number", "boolean"].includes(typeof value)) return value as JsonValue;
  throw new TypeError(`a filter compares with a string, number, boolean or null, not ${JSON.stringify(value)}`);
}

function fieldFilter(field: string, test: FieldFilter["test"]): Filter {
  return create(FilterSchema, { kind: { case: "field", value: { field, test } } });
}

function part(key: string, value: unknown): Filter {
  if (key === "all" || key === "any") {
    const filters = (value as FilterData[]).map(filterMessage);
    return create(FilterSchema, { kind: { case: key, value: { filters } } });
  }
  if (key === "not") return create(FilterSchema, { kind: { case: "not", value: filterMessage(value as FilterData) } });
  const field = TIMES.has(key) || key.startsWith("metadata.") ? key : `metadata.${key}`;
  const tests: FieldTests = isTests(value) ? value : { eq: value as Scalar };
  const conditions: Filter[] = [];
  const bounds = BOUNDS.filter((bound) => tests[bound] !== undefined);
  if (bounds.length > 0) {
    const range: Partial<Record<(typeof BOUNDS)[number], Bound>> = {};
    for (const bound of bounds) {
      const limit = tests[bound] as number | Date;
      range[bound] = create(BoundSchema, {
        value: limit instanceof Date ? { case: "time", value: timestampFromDate(limit) } : { case: "number", value: limit },
      });
    }
    conditions.push(fieldFilter(field, { case: "range", value: create(RangeSchema, range) }));
  }
  if ("eq" in tests) {
    conditions.push(fieldFilter(field, { case: "equals", value: fromJson(ValueSchema, scalar(tests.eq)) }));
  }
  if (tests.in !== undefined) {
    conditions.push(fieldFilter(field, { case: "in", value: fromJson(ListValueSchema, tests.in.map(scalar)) }));
  }
  if (tests.contains !== undefined) {
    conditions.push(fieldFilter(field, { case: "contains", value: fromJson(ValueSchema, scalar(tests.contains)) }));
  }
  if (tests.exists !== undefined) conditions.push(fieldFilter(field, { case: "exists", value: tests.exists }));
  return conditions.length === 1 ? conditions[0] : create(FilterSchema, { kind: { case: "all", value: { filters: conditions } } });
}

/** The protos' `Filter` for `data`. Throws a `TypeError` for what no filter can say. */
export function filterMessage(data: FilterData): Filter {
  const parts = Object.entries(data)
    .filter(([, value]) => value !== undefined)
    .map(([key, value]) => part(key, value));
  if (parts.length === 0) throw new TypeError("an empty filter: give at least one condition");
  return parts.length === 1 ? parts[0] : create(FilterSchema, { kind: { case: "all", value: { filters: parts } } });
}

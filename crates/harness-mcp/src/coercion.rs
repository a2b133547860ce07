//! Numbers and booleans sent as strings. Small models often write `{"a": "3"}` where an MCP
//! tool's schema asks for a number; the server would refuse it (or take it as text). Where
//! the schema asks for a number, an integer or a boolean and the string parses as one, the
//! value is passed converted and the result says so; any other string is refused as before.

use serde_json::{Map, Number, Value};

/// The scalar types a string may stand for.
const COERCIBLE: [&str; 3] = ["number", "integer", "boolean"];

/// `schema` with every property (of the arguments object, of nested objects and of array
/// items) whose type is number, integer or boolean also accepting a string: the schema the
/// arguments are checked against before [`coerce`] converts them. `None` when nothing in
/// `schema` asks for such a type.
pub(crate) fn accepting_strings(schema: &Value) -> Option<Value> {
    let mut widened = schema.clone();
    widen(&mut widened).then_some(widened)
}

fn widen(schema: &mut Value) -> bool {
    let Some(object) = schema.as_object_mut() else {
        return false;
    };
    let mut changed = false;
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for property in properties.values_mut() {
            changed |= widen_type(property);
            changed |= widen(property);
        }
    }
    if let Some(items) = object.get_mut("items") {
        changed |= widen_type(items);
        changed |= widen(items);
    }
    changed
}

/// Adds `"string"` to a coercible `type`.
fn widen_type(schema: &mut Value) -> bool {
    let Some(kind) = schema.get_mut("type") else {
        return false;
    };
    match kind {
        Value::String(name) if COERCIBLE.contains(&name.as_str()) => {
            *kind = Value::Array(vec![Value::String(name.clone()), Value::String("string".into())]);
            true
        }
        Value::Array(names)
            if names.iter().any(|name| COERCIBLE.iter().any(|c| name == c))
                && !names.iter().any(|name| name == "string") =>
        {
            names.push(Value::String("string".into()));
            true
        }
        _ => false,
    }
}

/// Converts, in `arguments`, each string that `schema` (the tool's own, not widened) wants
/// as a number, an integer or a boolean. Returns one note per conversion, for the result.
///
/// # Errors
/// A message naming the argument when such a string does not parse as the type.
pub(crate) fn coerce(schema: &Value, arguments: &mut Map<String, Value>) -> Result<Vec<String>, String> {
    let mut notes = Vec::new();
    coerce_object(schema, arguments, "", &mut notes)?;
    Ok(notes)
}

fn coerce_object(
    schema: &Value,
    object: &mut Map<String, Value>,
    at: &str,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return Ok(());
    };
    for (key, value) in object.iter_mut() {
        if let Some(property) = properties.get(key) {
            coerce_value(property, value, &format!("{at}/{key}"), notes)?;
        }
    }
    Ok(())
}

fn coerce_value(schema: &Value, value: &mut Value, at: &str, notes: &mut Vec<String>) -> Result<(), String> {
    match value {
        Value::String(text) => {
            let Some(kind) = wanted(schema) else {
                return Ok(());
            };
            let converted = parse(kind, text).ok_or_else(|| {
                format!(
                    "at {at}: the tool's schema asks for {kind_a} {kind}; \"{text}\" is not one",
                    kind_a = article(kind)
                )
            })?;
            notes.push(format!(
                "note: `{}` was sent as the string \"{text}\" and passed as the {kind} {converted} (the tool's schema asks for {} {kind})",
                at.trim_start_matches('/'),
                article(kind),
            ));
            *value = converted;
        }
        Value::Object(object) => coerce_object(schema, object, at, notes)?,
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (index, element) in items.iter_mut().enumerate() {
                    coerce_value(item, element, &format!("{at}/{index}"), notes)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The coercible type `schema` asks for, unless it also takes a string as it is.
fn wanted(schema: &Value) -> Option<&'static str> {
    let names: Vec<&str> = match schema.get("type")? {
        Value::String(name) => vec![name.as_str()],
        Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
        _ => return None,
    };
    if names.contains(&"string") {
        return None;
    }
    // An integer is also a number: try the narrower type first.
    ["integer", "number", "boolean"]
        .into_iter()
        .find(|kind| names.contains(kind))
}

fn parse(kind: &str, text: &str) -> Option<Value> {
    let text = text.trim();
    match kind {
        "boolean" => match text.to_ascii_lowercase().as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        "integer" => text.parse::<i64>().ok().map(|n| Value::Number(n.into())),
        _ => match text.parse::<i64>() {
            Ok(n) => Some(Value::Number(n.into())),
            Err(_) => text
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite())
                .and_then(Number::from_f64)
                .map(Value::Number),
        },
    }
}

fn article(kind: &str) -> &'static str {
    if kind == "integer" { "an" } else { "a" }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "number"},
                "n": {"type": "integer"},
                "flag": {"type": "boolean"},
                "name": {"type": "string"},
                "either": {"type": ["number", "string"]},
                "nested": {"type": "object", "properties": {"x": {"type": "integer"}}},
                "list": {"type": "array", "items": {"type": "number"}}
            }
        })
    }

    fn check(input: Value) -> Result<(Value, Vec<String>), String> {
        let Value::Object(mut map) = input else { panic!() };
        let notes = coerce(&schema(), &mut map)?;
        Ok((Value::Object(map), notes))
    }

    #[test]
    fn strings_that_parse_become_the_type_the_schema_asks_for() {
        let (value, notes) = check(json!({
            "a": "2.5", "n": " 7 ", "flag": "TRUE", "name": "42", "either": "3",
            "nested": {"x": "4"}, "list": ["1", 2]
        }))
        .unwrap();
        assert_eq!(
            value,
            json!({"a": 2.5, "n": 7, "flag": true, "name": "42", "either": "3", "nested": {"x": 4}, "list": [1, 2]})
        );
        assert_eq!(notes.len(), 5, "{notes:?}");
        assert!(
            notes[0].contains("`a` was sent as the string \"2.5\" and passed as the number 2.5"),
            "{notes:?}"
        );
        assert!(notes.iter().any(|note| note.contains("`nested/x`")), "{notes:?}");
        // Values of the right type are left alone, with no note.
        let (value, notes) = check(json!({"a": 1, "flag": false})).unwrap();
        assert_eq!(value, json!({"a": 1, "flag": false}));
        assert!(notes.is_empty());
    }

    #[test]
    fn strings_that_do_not_parse_are_refused_naming_the_argument() {
        for (input, needle) in [
            (
                json!({"a": "three"}),
                "at /a: the tool's schema asks for a number; \"three\" is not one",
            ),
            (json!({"n": "2.5"}), "at /n: the tool's schema asks for an integer"),
            (json!({"flag": "yes"}), "at /flag"),
            (json!({"list": ["1", "x"]}), "at /list/1"),
            (json!({"a": "NaN"}), "at /a"),
        ] {
            let err = check(input.clone()).unwrap_err();
            assert!(err.contains(needle), "{input}: {err}");
        }
    }

    #[test]
    fn only_coercible_properties_are_widened() {
        let widened = accepting_strings(&schema()).unwrap();
        assert_eq!(widened["properties"]["a"]["type"], json!(["number", "string"]));
        assert_eq!(widened["properties"]["flag"]["type"], json!(["boolean", "string"]));
        assert_eq!(widened["properties"]["name"]["type"], json!("string"));
        assert_eq!(widened["properties"]["either"]["type"], json!(["number", "string"]));
        assert_eq!(
            widened["properties"]["nested"]["properties"]["x"]["type"],
            json!(["integer", "string"])
        );
        assert_eq!(
            widened["properties"]["list"]["items"]["type"],
            json!(["number", "string"])
        );
        assert_eq!(
            accepting_strings(&json!({"type": "object", "properties": {"s": {"type": "string"}}})),
            None
        );
    }
}

//! MCP tool results onto harness blocks.

use harness_core::{Block, MediaSource, ToolOutput};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

/// Maps a `tools/call` result: text → text, image → image, audio → audio, an embedded text
/// resource → text headed by its URI, a blob resource → a file, a resource link → a text
/// line, structured content → its JSON as text when the server sent no text alongside it
/// (a string in it that repeats an image's or audio's data is replaced by a note: the data
/// is sent once, as the media block).
pub fn to_output(result: CallToolResult) -> ToolOutput {
    let mut content = Vec::with_capacity(result.content.len() + 1);
    for block in result.content {
        content.push(block_of(block));
    }
    if let Some(mut structured) = result.structured_content {
        let has_text = content.iter().any(|block| block.as_text().is_some());
        if !has_text {
            let media: Vec<String> = content
                .iter()
                .filter_map(|block| match block {
                    Block::Image {
                        source: MediaSource::Base64 { data, .. },
                    }
                    | Block::Audio {
                        source: MediaSource::Base64 { data, .. },
                    } => Some(data.clone()),
                    _ => None,
                })
                .collect();
            drop_media(&mut structured, &media);
            content.push(Block::text(structured.to_string()));
        }
    }
    if content.is_empty() {
        content.push(Block::text("(the tool returned no content)"));
    }
    ToolOutput {
        content,
        is_error: result.is_error.unwrap_or(false),
    }
}

/// Replaces every string of `value` equal to one of `media` (base64 data already sent as a
/// block) by a short note.
fn drop_media(value: &mut serde_json::Value, media: &[String]) {
    match value {
        serde_json::Value::String(text) if media.iter().any(|data| data == text) => {
            *text = "(the media data, sent as its own block)".to_owned();
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|item| drop_media(item, media)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|item| drop_media(item, media)),
        _ => {}
    }
}

fn block_of(block: ContentBlock) -> Block {
    match block {
        ContentBlock::Text(text) => Block::text(text.text),
        ContentBlock::Image(image) => Block::Image {
            source: MediaSource::Base64 {
                media_type: image.mime_type,
                data: image.data,
            },
        },
        ContentBlock::Audio(audio) => Block::Audio {
            source: MediaSource::Base64 {
                media_type: audio.mime_type,
                data: audio.data,
            },
        },
        ContentBlock::Resource(embedded) => match embedded.resource {
            ResourceContents::TextResourceContents { uri, text, .. } => {
                Block::text(format!("[resource {uri}]\n{text}"))
            }
            ResourceContents::BlobResourceContents {
                uri, mime_type, blob, ..
            } => Block::File {
                source: MediaSource::Base64 {
                    media_type: mime_type.unwrap_or_else(|| "application/octet-stream".to_owned()),
                    data: blob,
                },
                name: Some(uri),
            },
            other => Block::text(serde_json::to_string(&other).unwrap_or_default()),
        },
        ContentBlock::ResourceLink(link) => {
            let description = link.description.map(|d| format!(": {d}")).unwrap_or_default();
            Block::text(format!("[resource link {} ({}){description}]", link.uri, link.name))
        }
        // A content kind newer than this mapping: its JSON, so nothing is lost.
        other => Block::text(serde_json::to_string(&other).unwrap_or_default()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(value: serde_json::Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn image_data_repeated_in_structured_content_is_sent_once() {
        let output = to_output(result(json!({
            "content": [{"type": "image", "data": "QUJD", "mimeType": "image/png"}],
            "structuredContent": {"image": {"data": "QUJD", "mimeType": "image/png"}, "width": 3}
        })));
        let all = serde_json::to_string(&output.content).unwrap();
        assert_eq!(all.matches("QUJD").count(), 1, "{all}");
        assert!(all.contains("width"), "{all}");
    }

    #[test]
    fn maps_every_content_kind() {
        let output = to_output(result(json!({
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "data": "iVBO", "mimeType": "image/png"},
                {"type": "audio", "data": "UklG", "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "test://a", "mimeType": "text/plain", "text": "body"}},
                {"type": "resource", "resource": {"uri": "test://b", "blob": "AAEC"}},
                {"type": "resource_link", "uri": "test://c", "name": "c", "description": "third"}
            ]
        })));
        assert!(!output.is_error);
        assert_eq!(output.content[0], Block::text("hi"));
        assert_eq!(
            output.content[1],
            Block::Image {
                source: MediaSource::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBO".into()
                }
            }
        );
        assert!(matches!(&output.content[2], Block::Audio { .. }));
        assert_eq!(output.content[3], Block::text("[resource test://a]\nbody"));
        assert_eq!(
            output.content[4],
            Block::File {
                source: MediaSource::Base64 {
                    media_type: "application/octet-stream".into(),
                    data: "AAEC".into()
                },
                name: Some("test://b".into())
            }
        );
        assert_eq!(output.content[5], Block::text("[resource link test://c (c): third]"));
    }

    #[test]
    fn structured_content_becomes_text_only_without_text() {
        let output = to_output(result(json!({"content": [], "structuredContent": {"sum": 3}})));
        assert_eq!(output.content, [Block::text(r#"{"sum":3}"#)]);
        let output = to_output(result(
            json!({"content": [{"type": "text", "text": "3"}], "structuredContent": {"sum": 3}}),
        ));
        assert_eq!(output.content, [Block::text("3")]);
    }

    #[test]
    fn error_flag_and_empty_results() {
        let output = to_output(result(
            json!({"content": [{"type": "text", "text": "bad"}], "isError": true}),
        ));
        assert!(output.is_error);
        let output = to_output(result(json!({"content": []})));
        assert_eq!(output.text_content(), "(the tool returned no content)");
    }
}

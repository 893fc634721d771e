//! SOP triggers of a daemon generation: cron expressions (the same `croner` schedules as
//! `[cron.jobs]`) and MQTT topics (`rumqttc`, one connection per SOP). The webhook trigger is
//! the gateway's `POST /api/sops/{name}/webhook`; manual runs need no trigger.

use std::sync::Arc;
use std::time::Duration;

use warren_config::schema::cron::Schedule;
use warren_config::schema::sop::{Trigger, mqtt_broker};

use super::{Engine, defs};

/// Starts one task per triggered SOP; the caller aborts them when the generation stops.
pub(super) fn start(engine: &Arc<Engine>) -> Vec<tokio::task::JoinHandle<()>> {
    if !engine.settings().enabled {
        return Vec::new();
    }
    let loaded = defs::load(engine.root(), engine.host().snapshot().config());
    for problem in &loaded.problems {
        tracing::error!("SOP definition not loaded: {problem}");
    }
    let mut tasks = Vec::new();
    for (name, definition) in loaded.defs {
        match definition.def.trigger.view() {
            Trigger::Cron { cron, tz } => match Schedule::cron(&cron, tz.as_deref()) {
                Ok(schedule) => {
                    tasks.push(tokio::spawn(cron_loop(Arc::clone(engine), name, schedule)))
                }
                Err(e) => tracing::error!(sop = %name, "trigger.cron: {e}"),
            },
            Trigger::Mqtt { url, topic } => match mqtt_broker(&url) {
                Ok((host, port)) => tasks.push(tokio::spawn(mqtt_loop(
                    Arc::clone(engine),
                    name,
                    host,
                    port,
                    topic,
                ))),
                Err(e) => tracing::error!(sop = %name, "trigger.url: {e}"),
            },
            Trigger::Manual | Trigger::Webhook => {}
        }
    }
    tasks
}

async fn fire(engine: &Arc<Engine>, name: &str, trigger: &str, input: serde_json::Value) {
    match engine.start_run(name, trigger, input).await {
        Ok((run, _)) => tracing::info!(sop = %name, run = %run.id, trigger, "SOP triggered"),
        Err(e) => tracing::warn!(sop = %name, trigger, "SOP run not started: {e}"),
    }
}

async fn cron_loop(engine: Arc<Engine>, name: String, schedule: Schedule) {
    loop {
        let Some(next) = schedule.next_after(warren_store::cron::now_ms()) else {
            return;
        };
        let wait = u64::try_from(next - warren_store::cron::now_ms()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let input = serde_json::json!({"scheduled_at_ms": next});
        fire(&engine, &name, "cron", input).await;
    }
}

async fn mqtt_loop(engine: Arc<Engine>, name: String, host: String, port: u16, topic: String) {
    use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
    let mut client_id = [0u8; 4];
    let _ = getrandom::fill(&mut client_id);
    let id = format!("warren-sop-{name}-{}", warren_core::hex::encode(&client_id));
    let mut options = MqttOptions::new(id, host.clone(), port);
    options.set_keep_alive(Duration::from_secs(30));
    let (client, mut events) = AsyncClient::new(options, 16);
    let mut subscribed = false;
    loop {
        match events.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                // Every (re)connect subscribes again (clean session).
                match client.subscribe(topic.clone(), QoS::AtLeastOnce).await {
                    Ok(()) => {
                        if !subscribed {
                            tracing::info!(sop = %name, broker = %format!("{host}:{port}"), topic = %topic, "SOP MQTT trigger subscribed");
                        }
                        subscribed = true;
                    }
                    Err(e) => tracing::error!(sop = %name, "MQTT subscribe: {e}"),
                }
            }
            Ok(Event::Incoming(Packet::SubAck(_))) => {
                tracing::info!(sop = %name, topic = %topic, "SOP MQTT trigger listening");
            }
            Ok(Event::Incoming(Packet::Publish(p))) => {
                let payload = String::from_utf8_lossy(&p.payload).to_string();
                let mut input = serde_json::json!({"topic": p.topic, "payload": payload});
                if let Ok(serde_json::Value::Object(fields)) =
                    serde_json::from_str::<serde_json::Value>(&payload)
                    && let Some(obj) = input.as_object_mut()
                {
                    for (k, v) in fields {
                        obj.entry(k).or_insert(v);
                    }
                }
                fire(&engine, &name, "mqtt", input).await;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(sop = %name, broker = %format!("{host}:{port}"), "MQTT connection: {e}; retrying in 2 s");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

"""The gateway's endpoints: one APIRouter per area, included by `gateway.app.create_app`."""

from durable_rag.settings import Settings
from gateway.server import serve

serve(Settings())

from gateway.server import serve
from ragkit.settings import Settings

serve(Settings())
